"""`gpudoc fix --apply` / `--rerun` for a run that had no profile: the job read from its command.

The rung is written where each knob lives: a config file is edited (backup first, atomic); a flag
or override on the command line cannot be edited for the user, so the new command is handed back
(`fix --rerun` launches it). Nothing goes to a ``gpudoc.toml``: that is `gpudoc profile new NAME
--from-run`'s job.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoc.ladder.model import LadderResult
    from gpudoc.profiles.model import Profile
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RunStore


def apply_to_job(ladder: LadderResult, profile: Profile, record: RunRecord, *, rerun: bool,
                 store: RunStore) -> tuple[dict[str, Any] | None, list[str], Profile | None]:
    """(what was written, notes, the profile a relaunch takes). With ``rerun`` nothing is written
    here: the relaunch plans and writes its own edits, as every `gpudoc run` does. What is written
    is listed in the failed run's ``applied_edits`` (`gpudoc restore` undoes it)."""
    from gpudoc.bind import apply_file_edits, plan_bindings
    from gpudoc.runs.edits import keep_original

    chosen = ladder.first_profile_change()
    if chosen is None:
        return None, ["nothing written: no rung changes the job"], None
    new = profile.with_changes(chosen.new_knobs(), chosen.env)
    plan = plan_bindings(new.for_planning(), list(record.command), cwd=Path(record.cwd or "."))
    applied: dict[str, Any] = {"rung": chosen.rung, "command": list(plan.argv), "env": dict(chosen.env),
                               "files": [str(edit.path) for edit in plan.file_edits]}
    if rerun:
        return applied, [], new
    notes = []
    if list(plan.argv) != list(record.command) or chosen.env:
        notes.append(f"run next: {_next_command(record, plan.argv, chosen.env)}  (or `gpudoc fix --rerun {record.id}`)")
    done = _written_before(record, chosen.rung)
    if done and not plan.file_edits:
        # `fix --apply` twice on one failed run: the files hold the rung already, only not tried.
        return None, [f"nothing written: {chosen.rung} is already in {', '.join(done)} and not yet tried; "
                      f"`gpudoc fix --rerun {record.id}` launches it", *notes], new
    written = apply_file_edits(plan, keep=lambda data: keep_original(store, data)) if plan.file_edits else []
    if written:
        record.applied_edits.extend(dict(edit, rung=chosen.rung) for edit in written)
        store.save(record)
    applied["backups"] = [edit.get("backup") for edit in written if edit.get("backup")]
    return applied, notes, new


def _written_before(record: RunRecord, rung: str) -> list[str]:
    """The files an earlier `fix --apply` on this failed run wrote ``rung`` to."""
    return list(dict.fromkeys(str(edit.get("path")) for edit in record.applied_edits
                              if isinstance(edit, dict) and edit.get("rung") == rung and edit.get("path")))


def _next_command(record: RunRecord, argv: list[str], env: Mapping[str, str]) -> str:
    """The `gpudoc run` of the next attempt, with the failed run's own switches (--no-check, ...), as
    `fix --rerun` would launch it."""
    from dataclasses import replace

    from gpudoc.commands.run_options import relaunch_switches

    options = replace(relaunch_switches(record.id, record.run_switches, record.argv), command=list(argv))
    prefix = "".join(f"{name}={shlex.quote(value)} " for name, value in env.items())
    return f"{prefix}gpudoc {shlex.join(options.to_argv())}"
