"""The job's resolved command line and environment: pure functions of the profile and the plan.

Nothing here starts, reads or writes anything, so ``--dry-run`` shows exactly what ``run`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudoc import allocator


@dataclass(frozen=True)
class ResolvedCommand:
    """What ``gpudoc run`` launches: argv, the variables it sets, the config edits it makes."""

    argv: list[str]
    env_set: dict[str, str]
    file_edits: tuple = ()  # bind.FileEdit objects, applied just before launch
    conflicts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # Where each knob went ({"knob", "file", "key", "old", "new", "added"}), changed or not, and
    # one line per changed flag or file for the terminal ("ds.json: stage 2 -> 3").
    bindings: tuple[dict, ...] = ()
    said: tuple[str, ...] = ()
    plan: Any = field(default=None, compare=False, repr=False)  # the bind plan, to apply its edits

    def child_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        env.update(self.env_set)
        return env

    def to_dict(self) -> dict:
        """The SPEC's ``--dry-run --json`` document."""
        return {
            "command": list(self.argv),
            "env_set": dict(self.env_set),
            "file_edits": [{"path": str(getattr(e, "path", "")), "diff": getattr(e, "diff", "")}
                           for e in self.file_edits],
        }


def resolve(profile: Any, command: Sequence[str], *, alloc_name: str | None = None,
            plan: Any = None) -> ResolvedCommand:
    """The profile's ``[env]``, then the bind plan (``GPUDOC_<KNOB>``, placeholders, flags, files).

    ``alloc_name`` is the allocator variable the job's torch reads; a profile that sets either
    name gets its value written under that one (None: keep the profile's own spelling).
    """
    env: dict[str, str] = {str(k): _env_value(v) for k, v in dict(getattr(profile, "env", {}) or {}).items()}
    argv = list(command)
    edits: tuple = ()
    conflicts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    bindings: tuple[dict, ...] = ()
    said: tuple[str, ...] = ()
    if plan is not None:
        argv = list(plan.argv)
        env.update({str(k): _env_value(v) for k, v in plan.env.items()})
        edits = tuple(plan.file_edits)
        conflicts = tuple(plan.conflicts)
        notes = tuple(getattr(plan, "notes", ()) or ())
        bindings = tuple(getattr(plan, "bindings", ()) or ())
        said = tuple(plan.said()) if hasattr(plan, "said") else ()
    env = allocator.written_under(env, alloc_name)
    return ResolvedCommand(argv=argv, env_set=env, file_edits=edits, conflicts=conflicts, notes=notes,
                           bindings=bindings, said=said, plan=plan)


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
