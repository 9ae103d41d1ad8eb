"""Activation checkpointing's recomputed block against the loss's peak, and torchtitan's op-level
selective policy in eager and compiled blocks (``gpudoc.estimate.recompute``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpudoc.errors import ProfileError
from gpudoc.estimate import recompute
from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup, inputs_from_profile
from gpudoc.estimate.model import activation_bytes, compute_phases
from gpudoc.profiles.model import Profile

# Llama-3.1-8B's blocks: the linears in the order torchtitan's TransformerBlock calls them.
LLAMA_CALLS = [("q", 4096), ("k", 1024), ("v", 1024), ("o", 4096), ("gate", 14336), ("up", 14336), ("down", 4096)]
LLAMA = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, params=8.03e9)


def test_op_sac_keeps_every_other_matmul_and_a_compiled_block_what_its_backward_reads():
    # wq (1st), wv (3rd), w1 (5th) and w2 (7th) are kept by the eager caching mode; compiled, w2's
    # output, which only the residual add takes, is not saved.
    assert recompute.op_sac_matmul_widths(LLAMA_CALLS, compiled=False) == 4096 + 1024 + 14336 + 4096
    assert recompute.op_sac_matmul_widths(LLAMA_CALLS, compiled=True) == 4096 + 1024 + 14336
    # A plain MLP's down projection is the 6th matmul: never kept, compiled or not.
    gpt = [("q", 768), ("k", 768), ("v", 768), ("o", 768), ("up", 3072), ("down", 768)]
    assert recompute.op_sac_matmul_widths(gpt, compiled=False) == recompute.op_sac_matmul_widths(gpt, compiled=True) \
        == 768 + 768 + 3072


def test_the_recomputed_block_counts_only_beyond_the_loss_buffers():
    assert recompute.recompute_beyond_loss(once=3.0, loss_peak=10.0, logits_kept=2.0) == 0.0
    assert recompute.recompute_beyond_loss(once=9.0, loss_peak=10.0, logits_kept=2.0) == 1.0


def _setup(**kw) -> TrainSetup:
    base = {"micro_batch_size": 1, "seq_len": 32768, "precision": "bf16", "fsdp": True, "world_size": 8,
            "gradient_checkpointing": "full"}
    return TrainSetup(**{**base, **kw})


def test_a_full_checkpointed_model_peaks_at_the_loss_or_the_recompute_never_both():
    """torchtitan's Table 2 (Llama-3.1-8B, 32768 tokens a GPU, full AC): the loss's 4.2e9-logit buffers
    are freed before the last block is recomputed, so the block is not added on top of them; with a
    small vocabulary the recompute is the peak, beside the logits the output still holds."""
    held, once, _ = activation_bytes(LLAMA, _setup())
    assert once > 1e9
    big = compute_phases(Inputs(LLAMA, _setup()))
    assert big.forward_backward["activations"] == pytest.approx(held)
    small_vocab = replace(LLAMA, vocab=1024)
    small = compute_phases(Inputs(small_vocab, _setup()))
    logits_kept = 32768 * 1024 * 2.0  # the bf16 output
    assert small.forward_backward["activations"] == pytest.approx(held + once + logits_kept
                                                                   - small.forward_backward["logits"])
    # LitGPT's loop holds the head's fp32 chunks through backward: 4 B a logit beside the recompute.
    chunks = compute_phases(Inputs(small_vocab, _setup(loss="fp32_chunks")))
    assert chunks.forward_backward["activations"] == pytest.approx(held + once + 2 * logits_kept
                                                                    - chunks.forward_backward["logits"])


def test_compiled_blocks_keep_less_under_torchtitans_selective_policy():
    """torchtitan's Tables 1 and 3: compile saves 5.0-5.4 GiB at 2 x 8192 tokens; the w2 outputs the
    eager caching mode keeps are 32 layers x 16384 tokens x 4096 x 2 B = 4 GiB of it."""
    eager = compute_phases(Inputs(LLAMA, _setup(micro_batch_size=2, seq_len=8192, gradient_checkpointing="selective")))
    compiled = compute_phases(Inputs(LLAMA, _setup(micro_batch_size=2, seq_len=8192, gradient_checkpointing="selective",
                                                   compiled=True)))
    saved = eager.forward_backward["activations"] - compiled.forward_backward["activations"]
    assert saved == pytest.approx(32 * 16384 * 4096 * 2.0)
    assert any("compiled" in note for note in compiled.notes)
    # Full checkpointing keeps each block's input, compiled or not.
    full = _setup(gradient_checkpointing="full")
    assert compute_phases(Inputs(LLAMA, full)).peak == compute_phases(Inputs(LLAMA, replace(full, compiled=True))).peak


def _profile(tmp_path: Path, train: dict) -> Profile:
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    model = {"hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256}
    return Profile(name="p", path=path, chain=(path,), model=model,
                   train={"micro_batch_size": 2, "max_seq_len": 8192, "precision": "bf16", **train})


def test_the_compile_knob_is_read_and_a_bad_value_refused_in_one_line(tmp_path):
    assert inputs_from_profile(_profile(tmp_path, {"compile": True})).setup.compiled
    assert not inputs_from_profile(_profile(tmp_path, {})).setup.compiled
    with pytest.raises(ProfileError, match=r"^\[train\] compile = 'yes': expected true or false") as raised:
        inputs_from_profile(_profile(tmp_path, {"compile": "yes"}))
    assert raised.value.file == str(tmp_path / "gpudoc.toml")
