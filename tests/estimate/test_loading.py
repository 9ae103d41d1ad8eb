"""The load phase of a 4-bit model in the formula: every weight with the largest matrix's quantization,
by the library the precision says (bitsandbytes under autocast, torchtune's torchao in pure half
precision, as its release quantizes: ``[estimate] torchao``), the peak where it is larger than the step;
through `gpudoc estimate --json` with a profile."""

from __future__ import annotations

import json

from gpudoc.commands.estimate import estimate_command
from gpudoc.estimate import terms
from tests.conftest import captured_workspace

# Llama-2-7B, as torchtune's QLoRA recipe trains it: its largest matrix is the MLP's 4096 x 11008.
LLAMA2_7B = ('[model]\nparams = 6738415616\nlayers = 32\nhidden = 4096\nheads = 32\nkv_heads = 32\nffn = 11008\n'
             'vocab = 32000\n')
LARGEST = 4096 * 11008


def _estimate(tmp_path, train: str) -> dict:
    (tmp_path / "gpudoc.toml").write_text(f"[train]\nlora_rank = 8\nquantization = \"nf4\"\nmicro_batch_size = 1\n"
                                          f"gradient_checkpointing = true\n{train}\n{LLAMA2_7B}")
    ws = captured_workspace(tmp_path)
    estimate_command(ws, as_json=True)
    return json.loads(ws.console.out.getvalue())


def test_a_short_sequence_peaks_while_torchtunes_4bit_weights_are_quantized_at_load(tmp_path):
    doc = _estimate(tmp_path, 'max_seq_len = 16\nprecision = "bf16-true"')
    phases = doc["phases"]
    assert doc["peak_phase"] == "load" and doc["peak_bytes"] == phases["load"]
    assert phases["load"] > max(phases["first_step"], phases["steady_state"])
    assert doc["breakdown"]["workspace"] == round(terms.nf4_load_bytes(LARGEST, library="torchao"))
    assert doc["breakdown"]["activations"] == doc["breakdown"]["optimizer"] == 0
    assert any(n.startswith("the peak is at load") and "torchao's to_nf4, in chunks" in n for n in doc["notes"])


def test_torchao_0_1_quantizes_the_whole_weight_at_once_where_the_profile_names_it(tmp_path):
    """torchtune 0.1's pin: sixteen bf16 distances a weight of the largest matrix, not a chunk's."""
    chunked = _estimate(tmp_path, 'max_seq_len = 1024\nprecision = "bf16-true"')
    whole = _estimate(tmp_path, 'max_seq_len = 1024\nprecision = "bf16-true"\n[estimate]\ntorchao = "0.1"')
    assert chunked["peak_phase"] != "load" and whole["peak_phase"] == "load"
    assert whole["breakdown"]["workspace"] == round(terms.nf4_load_bytes(LARGEST, library="torchao-0.1"))
    assert whole["phases"]["load"] - chunked["phases"]["load"] == round(
        terms.nf4_load_bytes(LARGEST, library="torchao-0.1")) - round(terms.nf4_load_bytes(LARGEST, library="torchao"))
    assert any(n.startswith("the peak is at load") and "the whole weight at once" in n for n in whole["notes"])
    assert any(n.startswith("[estimate] torchao = 0.1") for n in whole["notes"])
    # The step is the same step: only the load's temporaries moved.
    assert whole["phases"]["steady_state"] == chunked["phases"]["steady_state"]


def test_bitsandbytes_packing_at_load_holds_no_more_than_the_steps_dequantization(tmp_path):
    """Under autocast (transformers' load_in_4bit): the half-precision weight while it is packed, the
    size of the weight each 4-bit matmul dequantizes in the step."""
    doc = _estimate(tmp_path, 'max_seq_len = 16\nprecision = "bf16"')
    phases = doc["phases"]
    assert doc["peak_phase"] != "load" and phases["load"] < doc["peak_bytes"]
    assert phases["load"] == doc["breakdown"]["weights"] + 2 * LARGEST


def test_a_long_sequence_peaks_in_the_step_with_the_load_beside_it(tmp_path):
    doc = _estimate(tmp_path, 'max_seq_len = 4096\nprecision = "bf16-true"')
    phases = doc["phases"]
    assert doc["peak_phase"] != "load" and phases["load"] < doc["peak_bytes"]
    # The load holds the weights the step holds, and the quantization's temporaries instead of the step's.
    assert phases["load"] == doc["breakdown"]["weights"] + round(terms.nf4_load_bytes(LARGEST, library="torchao"))
    assert not any(n.startswith("the peak is at load") for n in doc["notes"])


def test_without_4bit_weights_there_is_no_load_phase(tmp_path):
    (tmp_path / "gpudoc.toml").write_text(f'[train]\nmax_seq_len = 16\nprecision = "bf16-true"\n{LLAMA2_7B}')
    ws = captured_workspace(tmp_path)
    estimate_command(ws, as_json=True)
    assert "load" not in json.loads(ws.console.out.getvalue())["phases"]


def test_no_micro_batch_fits_a_card_the_model_cannot_be_loaded_on(tmp_path):
    doc = _estimate(tmp_path, 'max_seq_len = 16\nprecision = "bf16-true"')
    step, weights = doc["phases"]["steady_state"], doc["breakdown"]["weights"]
    # A card whose target holds the step (with its slack and the context: at most this much, the step
    # keeps its optimizer states too) but not the load (``total_bytes``: its peak is the load).
    step_total = step + terms.allocator_slack_bytes(step, weights, expandable_segments=False) + doc["context_bytes"]
    assert doc["peak_phase"] == "load" and step_total < doc["total_bytes"]
    budget = (step_total + doc["total_bytes"]) / 2
    train = f'max_seq_len = 16\nprecision = "bf16-true"\n[gpu]\nmemory_gib = {budget / 0.85 / 1024**3:.4f}'
    assert _estimate(tmp_path, train)["max_micro_batch_size"] == 0
