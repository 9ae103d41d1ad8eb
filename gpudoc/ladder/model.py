"""What the ladder hands back: suggestions (one rung each) and the result of a climb."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gpudoc.units import format_bytes


@dataclass(frozen=True)
class Suggestion:
    """One rung, made concrete for one profile.

    ``changes`` maps a ``[train]`` knob to ``[old, new]``; ``env`` maps a variable to its new value.
    ``expected_saving_bytes`` is per GPU; negative for the upward rung (it spends memory); None when
    neither an estimate nor a measured run can say.
    """

    rung: str
    changes: Mapping[str, list] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    semantic: bool = False
    expected_saving_bytes: int | None = None
    why: str = ""

    @property
    def changes_profile(self) -> bool:
        """True when applying it edits the profile (knobs or env); free-stray-memory does not."""
        return bool(self.changes or self.env)

    def new_knobs(self) -> dict[str, Any]:
        return {knob: new for knob, (_old, new) in self.changes.items()}

    def to_dict(self) -> dict:
        """Exactly the SPEC's suggestion keys."""
        return {
            "rung": self.rung,
            "changes": {k: [v[0], v[1]] for k, v in self.changes.items()},
            "env": dict(self.env),
            "semantic": self.semantic,
            "expected_saving_bytes": self.expected_saving_bytes,
            "why": self.why,
        }


@dataclass(frozen=True)
class Skipped:
    """A rung that was considered and not proposed, with the reason (for ``fix``'s explanation)."""

    rung: str
    reason: str

    def to_dict(self) -> dict:
        return {"rung": self.rung, "reason": self.reason}


@dataclass(frozen=True)
class LadderResult:
    """``suggestions`` in the order to try them; ``semantic_held_back`` are rungs that would apply
    but change the experiment (proposed only with ``--allow-semantic``); ``exhausted`` is true when
    no suggestion is left for this failure.
    """

    suggestions: list[Suggestion] = field(default_factory=list)
    exhausted: bool = False
    semantic_held_back: list[Suggestion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    shortfall_bytes: int | None = None

    @property
    def held_back(self) -> list[Suggestion]:
        return self.semantic_held_back

    def without(self, reasons: Mapping[str, str]) -> LadderResult:
        """This result less the rungs in ``reasons`` (rung -> why not), kept as skipped with the reason."""
        if not reasons:
            return self
        suggestions = [s for s in self.suggestions if s.rung not in reasons]
        return replace(self, suggestions=suggestions, exhausted=self.exhausted or not suggestions,
                       semantic_held_back=[s for s in self.semantic_held_back if s.rung not in reasons],
                       skipped=[*self.skipped, *(Skipped(rung, why) for rung, why in reasons.items())])

    def first_profile_change(self) -> Suggestion | None:
        """The change the next relaunch makes. An environment-only rung whose saving the OOM's own
        figures bound below the shortfall (expandable segments can free at most the reserved but
        unallocated memory) cannot make the job fit alone: it rides along with the next rung, in
        the same relaunch, instead of costing one of its own."""
        changes = [s for s in self.suggestions if s.changes_profile]
        if not changes:
            return None
        first = changes[0]
        if (len(changes) > 1 and not first.changes and changes[1].changes and self.shortfall_bytes is not None
                and first.expected_saving_bytes is not None and first.expected_saving_bytes < self.shortfall_bytes):
            second = changes[1]
            savings = (first.expected_saving_bytes, second.expected_saving_bytes)
            return Suggestion(
                f"{first.rung}+{second.rung}", second.changes, {**first.env, **second.env},
                first.semantic or second.semantic, None if None in savings else sum(s or 0 for s in savings),
                f"{first.rung} alone frees at most {format_bytes(first.expected_saving_bytes)} of the "
                f"{format_bytes(self.shortfall_bytes)} short, so it goes with {second.rung} in one relaunch: "
                f"{second.why}")
        return first

    def to_dict(self) -> dict:
        return {
            "suggestions": [s.to_dict() for s in self.suggestions],
            "exhausted": self.exhausted,
            "semantic_held_back": [s.to_dict() for s in self.semantic_held_back],
            "notes": list(self.notes),
            "skipped": [s.to_dict() for s in self.skipped],
            "shortfall_bytes": self.shortfall_bytes,
        }


class PastRun(Protocol):
    """What the ladder reads of an earlier run (a ``gpudoc.runs.record.RunRecord``): the ladder
    never reads the run store itself, its caller hands the history in."""

    @property
    def id(self) -> str: ...

    @property
    def knobs(self) -> dict[str, Any]: ...

    @property
    def env(self) -> dict[str, str]: ...

    @property
    def peak_bytes(self) -> int | None: ...

    @property
    def succeeded(self) -> bool: ...

    @property
    def failed_oom(self) -> bool: ...

    @property
    def gpu_names(self) -> list[str]: ...

    @property
    def gpu_totals(self) -> dict[str, int]: ...

    @property
    def arrival(self) -> dict | None: ...
