"""What a rung costs in time per optimizer step: measured on this job's own history where two of
its runs differ by exactly the rung's change and both timed their steps, else a published typical
figure, named as such; unknown otherwise (never guessed).

The ladder puts the cheaper in time first among the rungs expected to fit, and after a run that
left memory unused proposes turning a costly rung back off, with the step time it should buy back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The published typical step-time cost of a rung, as a fraction of the step time without it.
# Gradient checkpointing recomputes the forward's activations during the backward: "Training will
# be ~20% slower" (Hugging Face Transformers' guide, docs/transformers/grad_checkpointing).
PUBLISHED: dict[str, tuple[float, str]] = {
    "gradient-checkpointing": (0.20, "the published typical cost of gradient checkpointing, ~20% slower per step "
                                     "(Hugging Face Transformers' gradient checkpointing guide)"),
}
# Rungs that change no computation of the step: the allocator's setting, another process's memory.
FREE = ("expandable-segments", "free-stray-memory")


@dataclass(frozen=True)
class StepCost:
    """``change``: the step time's relative change (+0.2: 20% slower); ``basis``: where it is from."""

    change: float
    basis: str

    def text(self) -> str:
        return f"{self.change:+.0%} step time ({self.basis})"


def _seconds(run: Any) -> float | None:
    steps = getattr(run, "steps", None) or {}
    value = steps.get("seconds_per_step") if isinstance(steps, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def measured(changes: Mapping[str, list], history: Iterable[Any]) -> StepCost | None:
    """The step-time change between two timed runs of this job that differ by exactly ``changes``
    (each knob from its old value to its new one, every other knob the same); the latest pair."""
    if not changes:
        return None
    timed = [(run, seconds) for run in history if (seconds := _seconds(run)) is not None]
    found = None
    for before, slow_before in timed:
        if any(before.knobs.get(k) != old for k, (old, _new) in changes.items()):
            continue
        rest = {k: v for k, v in before.knobs.items() if k not in changes}
        for after, slow_after in timed:
            if all(after.knobs.get(k) == new for k, (_old, new) in changes.items()) and \
                    {k: v for k, v in after.knobs.items() if k not in changes} == rest:
                found = StepCost(slow_after / slow_before - 1,
                                 f"measured on this job: run {before.id} {slow_before:.3g} s/step, "
                                 f"run {after.id} {slow_after:.3g} s/step")
    return found


def step_cost(rung: str, changes: Mapping[str, list], history: Iterable[Any]) -> StepCost | None:
    """What applying ``rung`` (its ``changes`` to the knobs) does to the step time, or None."""
    if rung in FREE:
        return StepCost(0.0, "it changes no computation of the step")
    found = measured(changes, history)
    if found is not None:
        return found
    if rung in PUBLISHED:
        change, basis = PUBLISHED[rung]
        return StepCost(change, basis)
    return None


def cheaper_first(candidates: list[Any], shortfall: int | None, history: Iterable[Any]) -> tuple[list[Any], list[str]]:
    """``candidates`` with the rungs expected to fit (their saving covers ``shortfall``) whose cost
    is known reordered, cheaper in time first, in the places they held; every other rung stays
    where it was. A note says the first move and why."""
    history = tuple(history)
    if shortfall is None:
        return candidates, []
    costs: dict[int, StepCost] = {}
    for i, s in enumerate(candidates):
        if s.expected_saving_bytes is not None and s.expected_saving_bytes >= shortfall:
            cost = step_cost(s.rung, s.changes, history)
            if cost is not None:
                costs[i] = cost
    known = list(costs)
    ordered = sorted(known, key=lambda i: costs[i].change)  # stable: equal costs keep the ladder's order
    if ordered == known:
        return candidates, []
    out = list(candidates)
    for slot, i in zip(known, ordered):
        out[slot] = candidates[i]
    moved, passed = next((i, j) for i, j in zip(ordered, known) if i != j)
    first, second = candidates[moved].rung, candidates[passed].rung
    return out, [f"{first} goes before {second}: both are expected to fit, and {first} costs less time per step "
                 f"({costs[moved].text()}) than {second} ({costs[passed].text()})"]


def speed_back(knobs: Mapping[str, Any], record: Any, savings: Any, budget: int,
               history: Iterable[Any]) -> tuple[Any, str | None, StepCost | None]:
    """After a run that left memory unused: gradient checkpointing turned back off, when its peak
    without it is predicted to fit ``budget``; ``(Suggestion or None, a note when not, the step
    time it buys back)``. The
    predicted peak: a run of this job without it (measured), else the estimate's growth; the step
    time it buys back: measured the same way, else the published figure."""
    from gpudoc.ladder.model import Suggestion
    from gpudoc.units import format_bytes

    if knobs.get("gradient_checkpointing") is not True:
        return None, None, None
    history = tuple(history)
    off = {**knobs, "gradient_checkpointing": False}
    ran = [r for r in history if r.succeeded and r.knobs == off and r.peak_bytes]
    peak = record.peak_bytes
    if ran:
        predicted, basis = ran[-1].peak_bytes, f"run {ran[-1].id}, which ran without it"
    else:
        estimated, current = savings.predicted_peak({"gradient_checkpointing": False}), savings.current_peak
        if estimated is None or current is None:
            return None, ("gradient checkpointing could be turned off for speed, but nothing predicts the peak "
                          "without it (no estimate, no run of this job without it)"), None
        predicted, basis = peak + max(estimated - current, 0), "the estimate's growth"
    if predicted > budget:
        return None, (f"gradient checkpointing stays on: without it the peak is predicted at "
                      f"{format_bytes(predicted)}, over the target {format_bytes(budget)} ({basis})"), None
    changes = {"gradient_checkpointing": [True, False]}
    cost = measured(changes, (*history, record))
    if cost is None:
        published, source = PUBLISHED["gradient-checkpointing"]
        cost = StepCost(1 / (1 + published) - 1, source + ", bought back")
    seconds = _seconds(record)
    faster = f", {seconds:.3g} s -> {seconds * (1 + cost.change):.3g} s per step" if seconds else ""
    why = (f"the run peaked at {format_bytes(peak)}; gradient_checkpointing True -> False is predicted to peak at "
           f"{format_bytes(predicted)} (target {format_bytes(budget)}, from {basis}) and to change the step time "
           f"by {cost.change:+.0%}{faster} ({cost.basis}): no activation is computed twice")
    return Suggestion("drop-gradient-checkpointing", changes, {}, False, -int(predicted - peak), why), None, cost
