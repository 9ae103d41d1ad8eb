"""A Megatron-LM job's model state as its DDP and optimizer keep it (``estimate.megatron``), read from
its own command through ``gpudoc estimate --json -- torchrun ... pretrain_gpt.py ...``: checked against
Megatron-LM's own table of bytes a parameter (docs/source/distrib_optimizer.md)."""

from __future__ import annotations

import json

import pytest

from gpudoc.commands.estimate import estimate_command
from tests.conftest import captured_workspace

SHAPES = '[model]\narch = "decoder"\nlayers = 8\nhidden = 256\nheads = 8\nffn = 1024\nvocab = 50304\n'
# 8 data-parallel ranks, 64 sequences a step: 8 micro batches of 1 each.
COMMAND = ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "256",
           "--num-attention-heads", "8", "--seq-length", "512", "--micro-batch-size", "1", "--global-batch-size", "64"]
D = 8


def _estimate(tmp_path, *flags: str, simulate: bool = False) -> dict:
    (tmp_path / "gpudoc.toml").write_text(SHAPES)
    (tmp_path / "pretrain_gpt.py").write_text("from megatron.training import pretrain\n")
    ws = captured_workspace(tmp_path)
    estimate_command(ws, as_json=True, command=[*COMMAND, *flags], simulate=simulate)
    return json.loads(ws.console.out.getvalue())


@pytest.mark.parametrize(("flags", "per_param"), [
    ((), 16), (("--bf16",), 18), (("--fp16",), 20),
    (("--use-distributed-optimizer",), 8 + 8 / D), (("--bf16", "--use-distributed-optimizer"), 6 + 12 / D),
    (("--fp16", "--use-distributed-optimizer"), 4 + 16 / D)])
def test_the_model_state_is_megatrons_table(tmp_path, flags, per_param):
    doc = _estimate(tmp_path, *flags)
    params, fb = doc["inputs"]["params"], doc["breakdown"]
    assert doc["inputs"]["zero_stage"] == (1 if "--use-distributed-optimizer" in flags else 0)
    # Through forward and backward: the grad buffer is allocated for good, beside the states.
    assert doc["peak_phase"] == "forward_backward" and fb["gradients"] > 0
    assert (fb["weights"] + fb["gradients"] + fb["optimizer"]) / params == pytest.approx(per_param)
    # The grad buffer is what DDP reduces (no bucket beside it), and the fused Adam steps in place.
    assert fb["workspace"] == 0
    assert doc["phases"]["optimizer_step"] == fb["weights"] + fb["gradients"] + fb["optimizer"]
    assert any(n.startswith("Megatron-LM: gradients in its DDP's contiguous grad buffer") for n in doc["notes"])


def test_the_simulation_leaves_megatron_to_the_formula_and_says_why(tmp_path):
    doc = _estimate(tmp_path, "--bf16", simulate=True)
    assert doc["source"] == "formula"
    assert any(n.startswith("simulation unavailable, the formula answers: a Megatron-LM job") for n in doc["notes"])
