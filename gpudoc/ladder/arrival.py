"""Did a relaunch's changes reach the job? Judged from what the relaunch's probe saw it train with,
else from what the job printed and from the OOM itself.

A job that never reads the knob gpudoc changed fails the same way again; without this check the
ladder would walk down rung after rung of changes that change nothing. The evidence, strongest
first: the probe inside the relaunched job saw the value it trained with (the micro batch of its
input, its backward passes per step, its autocast, what its framework resolved); else the job
printed the knob's old value and not the new one (the framework's own banner); or it printed
nothing, and its OOM asked for the same bytes with the same bytes allocated although a knob that
moves memory changed. Which of them decided each knob is kept (``source``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudoc.configvalues import format_value
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder.model import LadderResult
from gpudoc.units import format_bytes

# Knobs whose change moves the memory an OOM reports (the request or what is allocated).
MOVES_MEMORY = frozenset({"micro_batch_size", "max_seq_len", "gradient_checkpointing", "precision", "lora_rank",
                          "zero_stage", "offload_optimizer", "offload_params"})


@dataclass(frozen=True)
class Arrival:
    """``missing``: knob -> why gpudoc believes the job did not see the change; ``confirmed``: knobs
    the job was seen to run with their new value; ``source``: knob -> what decided it (one of
    ``SOURCES``), for each knob in either."""

    missing: Mapping[str, str] = field(default_factory=dict)
    confirmed: tuple[str, ...] = ()
    source: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"missing": dict(self.missing), "confirmed": list(self.confirmed), "source": dict(self.source)}


# What decided a knob's arrival, strongest first: the relaunch's probe, the job's own print of its
# settings, the OOM's figures.
SOURCES = ("probe", "echo", "oom-figures")


def check_arrival(changes: Mapping[str, tuple[Any, Any]], seen: Mapping[str, list[Any]],
                  before: Diagnosis | None, after: Diagnosis | None,
                  observed: Mapping[str, Any] | None = None) -> Arrival:
    """``changes``: knob -> (old, new) between two attempts; ``observed``: knob -> the value the new
    attempt's probe saw it train with (nothing when the probe was off or saw nothing); ``seen``:
    what the new attempt printed of its settings (``gpudoc.diagnose.echo.settings_seen``); the two
    attempts' diagnoses. The probe decides every knob it saw; the print and the figures the rest."""
    missing: dict[str, str] = {}
    confirmed: list[str] = []
    source: dict[str, str] = {}
    unproven = []
    for knob, (old, new) in changes.items():
        printed = seen.get(knob) or []
        if observed is not None and knob in observed:
            ran, source[knob] = observed[knob], "probe"
            if _same(ran, new):
                confirmed.append(knob)
            else:
                again = "still " if _same(ran, old) else ""
                missing[knob] = (f"the probe saw the job {again}train with {knob} = {format_value(ran)}, "
                                 f"not {format_value(new)}")
        elif new in printed:
            confirmed.append(knob)
            source[knob] = "echo"
        elif old in printed:
            missing[knob] = f"the job printed {knob} = {format_value(old)} again, not {format_value(new)}"
            source[knob] = "echo"
        else:
            unproven.append(knob)
    moving = [k for k in unproven if k in MOVES_MEMORY]
    same = same_oom(before, after)
    if moving and not confirmed and same:
        for knob in moving:
            missing[knob] = f"the out-of-memory error is the same as before the change ({same})"
            source[knob] = "oom-figures"
    return Arrival(missing, tuple(confirmed), source)


def _same(ran: Any, value: Any) -> bool:
    """Equal and of one kind: a probe's True is not a knob's 1."""
    return bool(ran == value) and isinstance(ran, bool) == isinstance(value, bool)


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
    return result.without({s.rung: "; ".join(f"{knob} did not reach the job ({unreached[knob]})" for knob in lost)
                           for s in (*result.suggestions, *result.semantic_held_back)
                           if (lost := [knob for knob in s.changes if knob in unreached])})
