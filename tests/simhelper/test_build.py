"""Which 4-bit layers the model is built with: the job's interpreter decides."""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpudoc.simhelper.build import build  # noqa: E402
from gpudoc.simhelper.kbit import Linear4bit, LinearNF4  # noqa: E402

# bin/test installs torchtune's torchao beside the venv (peft refuses that version in the venv itself).
TORCHAO = Path(sys.executable).parent.parent / "torchtune-torchao"
SPEC = {"hf_config": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
                      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100},
        "arch": "decoder", "seq_len": 16, "micro_batch_sizes": [1], "precision": "bf16-true",
        "gradient_checkpointing": "none", "quantization": "nf4"}


def _layers(model) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, torch.nn.Linear)}


@pytest.mark.skipif(find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here")
def test_nf4_is_torchtunes_where_the_interpreter_has_torchtune_and_torchao_and_no_bitsandbytes(monkeypatch):
    if find_spec("torchtune") is None or not (TORCHAO / "torchao").is_dir():
        pytest.skip("torchtune or its torchao is not installed")
    without = build(dict(SPEC))  # torchao is not importable from the venv itself
    assert Linear4bit in _layers(without.model) and LinearNF4 not in _layers(without.model)
    monkeypatch.syspath_prepend(str(TORCHAO))
    job = build(dict(SPEC))
    assert LinearNF4 in _layers(job.model) and Linear4bit not in _layers(job.model)
    assert any(n.startswith("4-bit: 7 linear layers as torchtune's NF4") for n in job.notes), job.notes
