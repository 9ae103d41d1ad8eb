"""Did a relaunch's changes reach the job? Judged from what the job printed and from the OOM itself.

A job that never reads the knob gpudoc changed fails the same way again; without this check the
ladder would walk down rung after rung of changes that change nothing. The evidence, strongest
first: the job printed the knob's old value and not the new one (the framework's own banner); or it
printed nothing, and its OOM asked for the same bytes with the same bytes allocated although a knob
that moves memory changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpudoc.bind.values import format_value
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder.model import LadderResult, Skipped, Suggestion
from gpudoc.units import format_bytes

# Knobs whose change moves the memory an OOM reports (the request or what is allocated).
MOVES_MEMORY = frozenset({"micro_batch_size", "max_seq_len", "gradient_checkpointing", "precision", "lora_rank",
                          "zero_stage", "offload_optimizer", "offload_params"})


@dataclass(frozen=True)
class Arrival:
    """``missing``: knob -> why gpudoc believes the job did not see the change; ``confirmed``: knobs
    the job printed with their new value."""

    missing: Mapping[str, str] = field(default_factory=dict)
    confirmed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"missing": dict(self.missing), "confirmed": list(self.confirmed)}


def check_arrival(changes: Mapping[str, tuple[Any, Any]], seen: Mapping[str, list[Any]],
                  before: Diagnosis | None, after: Diagnosis | None) -> Arrival:
    """``changes``: knob -> (old, new) between two attempts; ``seen``: what the new attempt printed
    of its settings (``gpudoc.diagnose.echo.settings_seen``); the two attempts' diagnoses."""
    missing: dict[str, str] = {}
    confirmed: list[str] = []
    unproven = []
    for knob, (old, new) in changes.items():
        printed = seen.get(knob) or []
        if new in printed:
            confirmed.append(knob)
        elif old in printed:
            missing[knob] = f"the job printed {knob} = {format_value(old)} again, not {format_value(new)}"
        else:
            unproven.append(knob)
    moving = [k for k in unproven if k in MOVES_MEMORY]
    same = same_oom(before, after)
    if moving and not confirmed and same:
        for knob in moving:
            missing[knob] = f"the out-of-memory error is the same as before the change ({same})"
    return Arrival(missing, tuple(confirmed))


def same_oom(before: Diagnosis | None, after: Diagnosis | None) -> str | None:
    """The figures both OOMs share, worded; None when they differ or are not both known."""
    if before is None or after is None or before.cause != "gpu_oom" or after.cause != "gpu_oom":
        return None
    figures = [(d.requested_bytes, d.allocated_bytes) for d in (before, after)]
    if None in figures[0] or figures[0] != figures[1]:
        return None
    return f"asked for {format_bytes(after.requested_bytes)} with {format_bytes(after.allocated_bytes)} allocated"


def without_unreached(result: LadderResult, unreached: Mapping[str, str]) -> LadderResult:
    """``result`` less every rung that changes a knob in ``unreached`` (knob -> why it did not
    reach the job): the job did not see that knob's last change, so it would not see the next one
    either. Those rungs are kept as skipped, with the reason."""
    if not unreached:
        return result
    skipped = list(result.skipped)

    def keep(suggestion: Suggestion) -> bool:
        lost = [knob for knob in suggestion.changes if knob in unreached]
        if lost:
            skipped.append(Skipped(suggestion.rung, "; ".join(f"{knob} did not reach the job ({unreached[knob]})"
                                                              for knob in lost)))
        return not lost

    suggestions = [s for s in result.suggestions if keep(s)]
    held_back = [s for s in result.semantic_held_back if keep(s)]
    return replace(result, suggestions=suggestions, semantic_held_back=held_back, skipped=skipped,
                   exhausted=result.exhausted or not suggestions)
