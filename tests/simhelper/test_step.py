"""The simulated step: the optimizer's implementations and what the breakdown attributes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpudoc.simhelper.build import Job  # noqa: E402
from gpudoc.simhelper.emulate import Emulation  # noqa: E402
from gpudoc.simhelper.step import Simulation  # noqa: E402
from gpudoc.simhelper.tracker import LiveBytes  # noqa: E402

MIB = 1024**2


def _simulate(impl: str, accumulation: int = 1, layers: int = 2, *, zero_grad_frees: bool = True) -> list[dict]:
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(layers)])
    job = Job(model, lambda b: torch.empty(b, 1024, device="meta"), [])
    spec = {"optimizer": "adamw", "optimizer_impl": impl, "gradient_accumulation_steps": accumulation,
            "zero_grad_frees": zero_grad_frees}
    tracker, emulation = LiveBytes(), Emulation()
    with tracker, emulation.installed():
        return Simulation(spec, job, emulation, tracker).run([4])


def test_first_step_has_no_optimizer_states_the_steady_state_has():
    run = _simulate("foreach")[0]
    params = 2 * (1024 * 1024 + 1024) * 4
    steady = run["steady_state"]
    assert steady["breakdown"]["optimizer"] == pytest.approx(2 * params, rel=0.01)
    assert steady["breakdown"]["weights"] == pytest.approx(params, rel=0.01)
    assert run["first_step"]["start_bytes"] < steady["start_bytes"]  # states exist before the second step


def test_foreach_allocates_whole_list_temporaries_fused_none():
    steady = {impl: _simulate(impl, layers=6)[0]["steady_state"] for impl in ("foreach", "forloop", "fused")}
    temps = {impl: s["breakdown"]["temporaries"] for impl, s in steady.items()}
    peaks = {impl: s["peak_bytes"] for impl, s in steady.items()}
    assert temps["fused"] == 0
    # A copy of every parameter at once (6 x 4 MiB) vs one parameter's at a time.
    assert temps["foreach"] >= 24 * MIB > 12 * MIB >= temps["forloop"] > 0
    assert peaks["foreach"] > peaks["forloop"] > peaks["fused"]


def test_accumulation_keeps_gradients_through_the_next_forward():
    single = _simulate("fused", 1)[0]["steady_state"]["stage_peaks"]["forward"]
    accumulated = _simulate("fused", 4)[0]["steady_state"]["stage_peaks"]["forward"]
    assert accumulated - single == pytest.approx(2 * (1024 * 1024 + 1024) * 4, rel=0.01)


def test_before_torch_2_the_gradients_zeroed_in_place_stay_through_the_next_forward():
    """``zero_grad(set_to_none=False)``: the steady state's forward starts with every gradient allocated,
    as accumulation's does; the first step is the same either way."""
    old, new = (_simulate("fused", 1, zero_grad_frees=frees)[0] for frees in (False, True))
    grads = 2 * (1024 * 1024 + 1024) * 4
    assert old["first_step"]["peak_bytes"] == new["first_step"]["peak_bytes"]
    forward = {name: run["steady_state"]["stage_peaks"]["forward"] for name, run in (("old", old), ("new", new))}
    assert forward["old"] - forward["new"] == pytest.approx(grads, rel=0.01)
    assert old["steady_state"]["start_bytes"] - new["steady_state"]["start_bytes"] == pytest.approx(grads, rel=0.01)
    assert old["steady_state"]["breakdown"]["gradients"] >= grads


@pytest.mark.parametrize(("impl", "accumulation"), [("foreach", 1), ("fused", 2), ("forloop", 1)])
def test_the_steady_state_composed_from_one_forward_and_backward_is_a_second_full_step(impl, accumulation):
    """``run`` steps forward and backward once for the first size: its steady state (peak, stage,
    breakdown, every stage's peak) is what stepping the whole step a second time measures."""
    composed = _simulate(impl, accumulation, layers=3)[0]
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(3)])
    job = Job(model, lambda b: torch.empty(b, 1024, device="meta"), [])
    spec = {"optimizer": "adamw", "optimizer_impl": impl, "gradient_accumulation_steps": accumulation}
    tracker, emulation = LiveBytes(), Emulation()
    with tracker, emulation.installed():
        simulation = Simulation(spec, job, emulation, tracker)
        first, steady = simulation.step(4), simulation.step(4)
    assert composed["first_step"] == first
    assert composed["steady_state"] == steady
    assert steady["breakdown"]["optimizer"] > 0


class _TinyLM(torch.nn.Module):
    """Embedding and head in bf16; with labels, the loss as transformers computes it (the bf16 logits
    upcast inside the loss), the logits kept by the output."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden, dtype=torch.bfloat16)
        self.head = torch.nn.Linear(hidden, vocab, bias=False, dtype=torch.bfloat16)

    def forward(self, input_ids, labels=None):
        from types import SimpleNamespace

        logits = self.head(self.embed(input_ids))
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, -2), labels.flatten())
        return SimpleNamespace(logits=logits, loss=loss)


def test_a_model_returning_fp32_logits_holds_the_fp32_copy_through_backward_instead_of_the_half_one():
    """``loss = "fp32_logits"`` (torchtune's decoder ``.float()``s its logits for torch's cross-entropy):
    two bytes a logit more than transformers' loss, whose output keeps the bf16 logits."""
    vocab, hidden, batch, seq = 4096, 64, 2, 256

    def backward_peak(loss: str | None) -> int:
        with torch.device("meta"):
            model = _TinyLM(vocab, hidden)
        ids = lambda b: {"input_ids": torch.zeros(b, seq, dtype=torch.long, device="meta"),  # noqa: E731
                         "labels": torch.zeros(b, seq, dtype=torch.long, device="meta")}
        spec = {"optimizer": "adamw", "optimizer_impl": "fused", **({"loss": loss} if loss else {})}
        tracker, emulation = LiveBytes(), Emulation()
        with tracker, emulation.installed():
            run = Simulation(spec, Job(model, ids, []), emulation, tracker).run([batch])[0]
        return run["first_step"]["stage_peaks"]["backward"]

    assert backward_peak("fp32_logits") - backward_peak(None) == pytest.approx(2 * batch * seq * vocab, rel=0.05)
    # ``loss_upcast = false`` (LitGPT's, nanoGPT's loss): the cross-entropy in bf16, no fp32 buffer of
    # the vocabulary's size: its log-softmax and the two gradients in bf16 instead of fp32.
    assert backward_peak(None) - backward_peak("half_logits") == pytest.approx(6 * batch * seq * vocab, rel=0.05)
