"""What the attempts so far prove about the memory, and the ladder's rules over it.

The relaunch owner (``gpudoc.commands.relaunch``) gathers the facts from the run records; the
rules live here:

- an attempt whose change did not reach the job tried nothing of it: the rung that changes that
  knob is not "already tried" there (``climb._tried_in``, from each run's ``arrival``);
- a change that reached the job and left the out-of-memory error as it was (the same request with
  the same bytes allocated, or the probe's same breakdown) rules out the rungs acting on the memory
  that change acts on (halving the micro batch twice with the identical OOM: the memory is not in
  the activations);
- the OOM's phase, when the probe saw it, picks the family: in the optimizer step the activations
  are already freed, so only the rungs acting on the optimizer's memory can help;
- so does its breakdown: when the live tensors other than parameters, gradients and optimizer states
  (the activations and temporaries) hold almost nothing of what was allocated, no activation rung
  can free the memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudoc.configvalues import format_value

ACTIVATIONS = "activations"
OPTIMIZER = "optimizer states"

# Which memory a knob's change acts on (the knobs whose families the evidence can rule out).
KNOB_FAMILY: Mapping[str, str] = {
    "micro_batch_size": ACTIVATIONS, "max_seq_len": ACTIVATIONS, "gradient_checkpointing": ACTIVATIONS,
    "zero_stage": OPTIMIZER, "offload_optimizer": OPTIMIZER,
}
# The built-in rungs by the memory they free; a user rung by its knob's.
RUNG_FAMILY: Mapping[str, str] = {
    "halve-micro-batch": ACTIVATIONS, "gradient-checkpointing": ACTIVATIONS, "shorter-sequences": ACTIVATIONS,
    "zero-stage": OPTIMIZER, "offload-optimizer": OPTIMIZER,
}
# The allocator's bookkeeping the process stays within, whatever the knobs: two OOMs sharing these
# figures held the same memory when they failed.
_MEMORY_FIGURES = ("parameters", "gradients", "optimizer_states", "other")
# Activations and temporaries under this share of the allocated memory: nothing to free there.
ACTIVATIONS_NEGLIGIBLE = 0.05


@dataclass(frozen=True)
class Attempt:
    """One relaunch of the chain: ``changes`` (knob -> (old, new)) against the attempt before it,
    ``missing`` (knob -> why it did not reach the job), and ``unchanged`` (the OOM's figures, worded,
    when they are the same as the attempt before's; None when they moved or are unknown)."""

    run_id: str
    changes: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)
    unchanged: str | None = None


@dataclass(frozen=True)
class Evidence:
    """The facts the ladder weighs beside the diagnosis: the chain of attempts (newest first), and
    the failing run's OOM as the probe saw it (``oom.phase``)."""

    attempts: tuple[Attempt, ...] = ()
    phase: str | None = None
    breakdown: Mapping[str, Any] | None = None  # the probe's, at this OOM

    def ruled_out(self) -> dict[str, str]:
        """family -> why no rung of it is proposed."""
        found: dict[str, str] = {}
        if self.phase == "optimizer":
            found[ACTIVATIONS] = ("the out-of-memory error came in the optimizer step (the probe saw it), after the "
                                  "activations were freed: the memory is not in the activations")
        negligible = _negligible_activations(self.breakdown)
        if negligible and ACTIVATIONS not in found:
            found[ACTIVATIONS] = negligible
        for attempt in self.attempts:
            if attempt.unchanged is None:
                continue
            for knob, (old, new) in attempt.changes.items():
                family = KNOB_FAMILY.get(knob)
                if family is None or family in found or knob in attempt.missing:
                    continue
                found[family] = (f"{knob} {format_value(old)} -> {format_value(new)} reached the job in run "
                                 f"{attempt.run_id} and the out-of-memory error stayed the same ({attempt.unchanged}): "
                                 f"the memory is not in the {family}")
        return found


def family_of(rung: str, knobs: Mapping[str, Any] | None = None) -> str | None:
    """The memory a rung frees: a built-in rung's, else the family of the one knob it changes."""
    if rung in RUNG_FAMILY:
        return RUNG_FAMILY[rung]
    families = {KNOB_FAMILY.get(knob) for knob in knobs or {}}
    return families.pop() if len(families) == 1 else None


def same_breakdown(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """The probe's breakdowns of two OOMs, worded when the memory held was the same; None otherwise."""
    if not before or not after:
        return None
    shared = [key for key in _MEMORY_FIGURES if key in before and key in after]
    # Every figure, and some memory in them: a probe that saw nothing held proves nothing the same.
    if len(shared) < len(_MEMORY_FIGURES) or not any(after[key] for key in shared):
        return None
    if any(before[key] != after[key] for key in shared):
        return None
    from gpudoc.units import format_bytes

    return "the probe saw " + ", ".join(f"{key.replace('_', ' ')} {format_bytes(int(after[key]))}" for key in shared)


def _negligible_activations(breakdown: Mapping[str, Any] | None) -> str | None:
    """Worded, when the probe's breakdown shows the activations and temporaries ("other") holding
    almost nothing of the memory allocated at the OOM; None when they matter or are unknown."""
    if not breakdown or not all(isinstance(breakdown.get(key), int) for key in _MEMORY_FIGURES):
        return None
    total = sum(int(breakdown[key]) for key in _MEMORY_FIGURES)
    if total <= 0 or breakdown["other"] >= ACTIVATIONS_NEGLIGIBLE * total:
        return None
    from gpudoc.units import format_bytes

    held = ", ".join(f"{key.replace('_', ' ')} {format_bytes(int(breakdown[key]))}" for key in _MEMORY_FIGURES[:3])
    return (f"at the OOM the activations and temporaries held {format_bytes(int(breakdown['other']))} of the "
            f"{format_bytes(total)} allocated ({held}; the probe saw it): the memory is not in the activations")
