"""A torch.compile'd block without activation checkpointing keeps what its min-cut partition saves:
norm inputs and statistics, SDPA's tensors, the MLP's input projections, dropout masks and the LoRA
adapters' A outputs; the rest is recomputed in backward."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpudoc.estimate.inputs import ModelShape, TrainSetup
from gpudoc.estimate.model import activation_bytes
from gpudoc.estimate.sim_spec import unsupported_reason
from gpudoc.profiles.model import Profile
from tests.conftest import MEMORY_CASES
from tests.estimate.cases import load_records
from tests.estimate.user_path import profile_toml, run_case

# Llama-3.1-8B's shapes; LoRA on q and v as torchtune's llama3_1/8B_lora_single_device trains it.
LLAMA3 = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, params=8.03e9)
BY_ID = {r["id"]: r for r in load_records(MEMORY_CASES)}


def _setup(**kw: object) -> TrainSetup:
    base: dict = {"micro_batch_size": 2, "seq_len": 2048, "precision": "bf16-true", "lora_rank": 8,
                  "lora_targets": ("q", "v"), "lora_adapters": "own", "compiled": True}
    return TrainSetup(**{**base, **kw})


def test_a_compiled_block_keeps_norm_inputs_sdpa_tensors_and_the_mlps_input_projections():
    tokens, h, f = 2 * 2048, 4096, 14336
    held, once, notes = activation_bytes(LLAMA3, _setup())
    outside, _, _ = activation_bytes(replace(LLAMA3, layers=0), _setup())  # the final norm and head input
    # Per token and block: two norm inputs (bf16) with their statistics, q and the out (bf16, 2h each), k and
    # v at a quarter width, the fp32 log-sum-exp per head, gate and up (bf16), the adapters' A outputs.
    per_token = 2 * (2 * h + 8) + 2 * h * (2 + 2 * 8 / 32) + 4 * 32 + 2 * 2 * f + 2 * 8 * 4
    assert held - outside == pytest.approx(32 * tokens * per_token)
    assert once == 0 and any("torch.compile's partition" in n for n in notes)
    eager, _, _ = activation_bytes(LLAMA3, _setup(compiled=False))
    assert held < 0.65 * eager  # eager keeps the fp32 norm copies, SiLU's output and the gated product too
    # Checkpointed blocks keep their inputs either way; 4-bit layers run their own autograd functions.
    for kw in ({"gradient_checkpointing": "full"}, {"quantization": "nf4"}, {"attention": "eager"}):
        assert activation_bytes(LLAMA3, _setup(**kw)) == activation_bytes(LLAMA3, _setup(compiled=False, **kw))


def test_a_compiled_job_without_checkpointing_is_not_simulated_in_eager_mode(tmp_path: Path):
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    profile = Profile(name="p", path=path, chain=(path,), model={"hf_config": "config.json"}, train={"compile": True})
    assert "compile = true without checkpointing" in (unsupported_reason(profile, _setup()) or "")
    assert unsupported_reason(profile, _setup(gradient_checkpointing="full")) is None


def test_torchtunes_compiled_lora_row_without_checkpointing(tmp_path: Path):
    """tt3-04: Llama-3.1-8B LoRA on an A6000, batch 2 x 2048 packed, torch.compile, no checkpointing
    (the table's A6000 rows turn it off): 30.3 GiB reserved, +28.6% when its blocks were counted eager."""
    written = profile_toml(BY_ID["tt3-04"])
    assert "compile = true" in written and "gradient_checkpointing = false" in written
    result = run_case(BY_ID["tt3-04"], tmp_path, with_config=False)
    assert result.error is not None and abs(result.error) <= 0.05, result
