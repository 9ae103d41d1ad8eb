"""Which of the ladder's rungs the job's own bindings can write: a rung no place of the job's takes
(a knob it reads that its framework has no setting gpudoc writes) is not proposed, or the next relaunch
would stop at it with the binding's refusal instead of trying the rung after it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpudoc.errors import InputError, ProfileError, UsageError

if TYPE_CHECKING:
    from gpudoc.ladder.model import LadderResult
    from gpudoc.profiles.model import Profile
    from gpudoc.runs.record import RunRecord


def unplannable(ladder: LadderResult, profile: Profile, record: RunRecord, cwd: Path) -> dict[str, str]:
    """Rung -> why its changes cannot be written where the job reads them (a knob its framework takes
    no setting of: Megatron-LM's gradient_checkpointing), else the relaunch would stop at it; nothing
    when the job's own command cannot be planned as it is (said where the relaunch plans it)."""
    from gpudoc.bind import plan_bindings

    def plans(changed: Profile) -> str | None:
        try:
            plan_bindings(changed.for_planning(), list(record.command), cwd=Path(record.cwd or cwd))
        except ProfileError as exc:
            return str(exc)
        return None

    try:
        if plans(profile) is not None:
            return {}
    except (UsageError, InputError):
        return {}
    rungs = (*ladder.suggestions, *ladder.semantic_held_back)
    return {r.rung: f"no place of the job's takes it: {why}" for r in rungs
            if (why := plans(profile.with_changes(r.new_knobs(), r.env))) is not None}
