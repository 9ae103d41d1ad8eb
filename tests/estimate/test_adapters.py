"""Whose LoRA adapters a job trains, their dtype, and what each keeps of its input: checked against
peft itself where peft is installed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpudoc.estimate import adapters


@pytest.mark.parametrize(("model", "framework", "bind", "expected"), [
    ({"hf_config": "config.json"}, None, {}, "peft"),
    ({"hf_config": "config.json"}, "hf_trainer", {}, "peft"),
    ({"hf_config": "config.json"}, "torchtune", {}, "own"),
    ({"hf_config": "config.json"}, "litgpt", {}, "own"),
    ({"hf_config": "config.json"}, None, {"args": "torchtune"}, "own"),  # the profile names its framework
    ({"hf_config": "config.json"}, None, {"args": "hf-trainer"}, "peft"),
    ({"factory": "jobs.py:build"}, None, {}, "own"),
])
def test_whose_adapters_a_job_trains(model, framework, bind, expected):
    job = SimpleNamespace(framework=framework) if framework else None
    assert adapters.library(SimpleNamespace(model=model, job=job, bind=bind)) == expected


def test_peft_adapters_are_fp32_unless_an_engine_casts_the_module():
    assert adapters.param_bytes(adapters.PEFT, 2.0, sharded_engine=False) == 4.0
    assert adapters.param_bytes(adapters.PEFT, 2.0, sharded_engine=True) == 2.0
    assert adapters.param_bytes(adapters.OWN, 2.0, sharded_engine=False) == 2.0


@pytest.mark.parametrize(("dtype", "autocast"), [("bfloat16", False), ("bfloat16", True), ("float32", False)])
def test_what_peft_keeps_of_a_layers_input_is_what_the_formula_counts(dtype, autocast):
    """Two peft adapters on layers that read one input (no dropout): the bytes autograd keeps of
    tensors shaped like that input, against ``input_bytes`` (0: the input itself, kept once)."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.v = torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 64, bias=False)

        def forward(self, x):
            return self.q(x) + self.v(x)

    model = peft.get_peft_model(Block().to(getattr(torch, dtype)),
                                peft.LoraConfig(r=4, target_modules=["q", "v"], lora_dropout=0.0))
    x = torch.randn(8, 64, dtype=getattr(torch, dtype))
    kept: dict[int, int] = {}

    def pack(t):
        if t.shape == x.shape:
            kept[t.untyped_storage().data_ptr()] = t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(x)
    adapter = {p.element_size() for p in model.parameters() if p.requires_grad}
    assert adapter == {4}  # fp32, whatever the base
    x_bytes = x.element_size()
    own = adapters.input_bytes(4.0, float(x_bytes), autocast=autocast, dropout=False)
    assert sum(kept.values()) == (2 * own if own else x_bytes)
