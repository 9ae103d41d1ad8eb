"""Apply the next rung and relaunch: the one owner, for `fix --apply` / `--rerun` and `run --retry-oom`.

Flow: the ladder's facts for this chain (``climb``: the diagnosis, this machine's or the job's
torch facts, the profile's history, the chain's evidence, the knobs that did not reach the job) ->
the next relaunch, planned (``plan_next``: what ``fix --json`` shows as ``next``) -> written under
the edit lock (``apply_next``) -> relaunched, and whether its change reached the job checked
(``relaunch``). Both commands call these, so they see the same facts and pick the same rung.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.atomic import edit_lock
from gpudoc.commands.retry import job_torch_facts, record_diagnosis, say_arrival, unreached_knobs
from gpudoc.commands.writable import unplannable
from gpudoc.errors import InputError
from gpudoc.ladder import suggest, upward_result
from gpudoc.ladder.arrival import same_oom, without_unreached
from gpudoc.ladder.evidence import Attempt, Evidence, same_breakdown
from gpudoc.profiles.edit import apply_recorded, target_path
from gpudoc.profiles.loader import load_profile_file
from gpudoc.runs.edits import read_bytes
from gpudoc.runs.record import changes as table_changes

if TYPE_CHECKING:
    from gpudoc.commands.run_options import RunOptions
    from gpudoc.diagnose.diagnosis import Diagnosis
    from gpudoc.facts.model import Facts
    from gpudoc.ladder.model import LadderResult, Suggestion
    from gpudoc.profiles.model import Profile
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RunStore
    from gpudoc.workspace import Workspace

CHAIN_LOOKBACK = 32  # parents read back through a relaunch chain, at most


# -- the ladder's facts -------------------------------------------------------------------------

@dataclass(frozen=True)
class Climb:
    """The ladder for a failure; the knobs whose last change did not reach the job (knob -> (run,
    why)); the profile it climbed from: the knobs the failed run was observed to train with, believed
    over the reading (``gpudoc.commands.observed``); and the lines that say where the two differ."""

    ladder: LadderResult
    unreached: dict[str, tuple[str, str]]
    profile: Profile
    notes: tuple[str, ...] = ()


def climb(diag: Diagnosis, profile: Profile, ws: Workspace, *, record: RunRecord | None, allow_semantic: bool,
          facts: Facts | None = None, estimate: Any = None) -> Climb:
    """The ladder for this failure, from every fact gpudoc has of its chain. Rungs of a knob whose
    last change did not reach the job are left out, as are those of a knob the job ran with that has
    no place gpudoc may write."""
    from gpudoc.commands.observed import believe

    profile, believed, unwritable = believe(profile, record)
    if facts is None and record is not None:
        facts = machine_facts(record, ws)
    history = ws.history(profile, upto=record)
    if estimate is None and profile.model:
        from gpudoc.estimate.simulated import simulate_enabled

        if simulate_enabled(profile):  # each rung's saving is simulated too (cached per knob set)
            estimate = ws.estimator(profile, command=record.command if record is not None else None)
    if diag.cause == "ok" and record is not None:
        return Climb(upward_result(profile, record, facts, estimate=estimate, history=history), {}, profile, believed)
    evidence = chain_evidence(record, ws.store) if record is not None else None
    ladder = suggest(diag, profile, facts, history, allow_semantic=allow_semantic, estimate=estimate,
                     evidence=evidence)
    unreached = unreached_knobs(record, ws.store) if record is not None else {}
    left_out = {**unwritable, **{knob: f"run {run}: {why}" for knob, (run, why) in unreached.items()}}
    ladder = without_unreached(ladder, left_out)
    if record is not None:
        ladder = ladder.without(unplannable(ladder, profile, record, ws.cwd))
    return Climb(ladder, unreached, profile, believed)


def machine_facts(record: RunRecord, ws: Workspace) -> Facts | None:
    """This machine's facts when the job ran here (bf16 support, host RAM), with the allocator
    variable the job's own torch reads; the job's torch alone otherwise. Optional: without them the
    ladder works from the profile."""
    job = job_torch_facts(record, ws.environ)
    if record.host != socket.gethostname():
        return job
    try:
        facts = ws.gather(deep=False)
    except Exception:  # facts only refine the suggestions
        return None
    if job is not None and job.torch is not None:
        torch = facts.torch or job.torch
        facts = replace(facts, torch=replace(torch, alloc_env_name=job.torch.alloc_env_name))
    return facts


def chain_evidence(record: RunRecord, store: RunStore) -> Evidence:
    """What the chain that led to ``record`` proved (``gpudoc.ladder.evidence``): each relaunch's
    changes, whether they arrived, whether its OOM stayed the same; the probe's phase of this OOM."""
    attempts = []
    run, seen = record, {record.id}
    while run.parent and run.parent not in seen and len(seen) < CHAIN_LOOKBACK:
        parent = store.record_or_none(run.parent)
        if parent is None:
            break
        moved = {k: (parent.knobs.get(k), v) for k, v in run.knobs.items() if parent.knobs.get(k) != v}
        attempts.append(Attempt(run.id, moved, dict((run.arrival or {}).get("missing") or {}),
                                _unchanged(parent, run, store)))
        seen.add(parent.id)
        run = parent
    return Evidence(tuple(attempts), (record.oom or {}).get("phase"), (record.oom or {}).get("breakdown"))


def _unchanged(before: RunRecord, after: RunRecord, store: RunStore) -> str | None:
    """Both OOMs' figures, worded, when they are the same: the allocator's (the request and the bytes
    allocated) where both messages give them, they decide; the probe's breakdown otherwise."""
    old, new = record_diagnosis(before, store), record_diagnosis(after, store)
    if all(d is not None and d.requested_bytes is not None and d.allocated_bytes is not None for d in (old, new)):
        return same_oom(old, new)
    return same_breakdown((before.oom or {}).get("breakdown"), (after.oom or {}).get("breakdown"))


# -- the next relaunch, planned -----------------------------------------------------------------

@dataclass(frozen=True)
class NextPlan:
    """What the next relaunch changes: the rung(s), and where each change goes (``fix --json``'s
    ``next``, and what ``apply_next`` writes)."""

    rung: Suggestion
    profile: Profile  # the profile the relaunch runs under (its knobs changed)
    files: tuple[str, ...]  # what --apply writes: the profile, or the job's config files
    argv: list[str] | None  # the new command line, when its flags change
    file_edits: tuple[Any, ...] = field(default=(), compare=False)
    bind_plan: Any = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"rungs": self.rung.rung.split("+"),
                "changes": {knob: [old, new] for knob, (old, new) in self.rung.changes.items()},
                "env": dict(self.rung.env), "files": list(self.files), "argv": self.argv}


def plan_next(ladder: LadderResult, profile: Profile, record: RunRecord | None, cwd: Path) -> NextPlan | None:
    """The first profile-changing rung (with the allocator setting riding along when it cannot fit
    alone), made concrete: None when no rung changes anything (or, for a log alone, when no
    profile file would take it)."""
    from gpudoc.bind import plan_bindings

    chosen = ladder.first_profile_change()
    if chosen is None:
        return None
    new = profile.with_changes(chosen.new_knobs(), chosen.env)
    if record is None:  # a log: only the profile is written, the command is not known
        return NextPlan(chosen, new, (str(target_path(profile, cwd)),), None)
    here = Path(record.cwd or cwd)
    if profile.job is not None:  # no profile file: the changes go where the knobs live
        plan = plan_bindings(new.for_planning(), list(record.command), cwd=here)
        files = tuple(str(edit.path) for edit in plan.file_edits)
        argv = list(plan.argv) if list(plan.argv) != list(record.command) else None
        return NextPlan(chosen, new, files, argv, tuple(plan.file_edits), plan)
    argv = None
    if profile.path is not None and chosen.changes:
        try:
            launched = plan_bindings(new.for_planning(), list(record.command), cwd=here).argv
        except Exception:  # a binding the relaunch itself will refuse, naming it
            launched = None
        argv = list(launched) if launched is not None and list(launched) != record.launched else None
    return NextPlan(chosen, new, (str(target_path(profile, cwd)),), argv)


# -- written under the edit lock -------------------------------------------------------------------

@dataclass(frozen=True)
class Applied:
    """What ``apply_next`` did: ``written`` (FixResult's ``applied``; None when nothing), the lines
    that say why not, and the profile the relaunch takes (None: nothing to relaunch)."""

    written: dict[str, Any] | None
    notes: tuple[str, ...] = ()
    profile: Profile | None = None
    profile_path: Path | None = None


def apply_next(plan: NextPlan | None, ladder: LadderResult, diag: Diagnosis, profile: Profile,
               record: RunRecord | None, ws: Workspace, *, since: RunRecord | None, rerun: bool, strays_first: bool = True) -> Applied:
    """Write ``plan`` under the one edit lock. A profile is written only while it is still the one
    ``since`` ran with (a second apply on one failed run would stack a rung nobody tried); a job's
    config files are edited (backup first), its flags handed back as the next command. With
    ``strays_first``, memory held by other processes that covers the shortfall stops it: freeing
    them is the fix (--retry-oom passes over them, as it has --clean)."""
    strays = ladder.suggestions[0] if ladder.suggestions and not ladder.suggestions[0].changes_profile else None
    if strays_first and strays is not None and _covers(strays, ladder):
        gpu = f" --gpus {diag.gpu_index}" if diag.gpu_index is not None else ""
        return Applied(None, ("nothing written: the memory other processes held covers the shortfall; free it first "
                              f"(`gpudoc clean{gpu}`, or relaunch with `gpudoc run --clean`)",))
    if plan is None:
        what = "job" if profile.job is not None else "profile"
        return Applied(None, (f"nothing written: no rung changes the {what}",))
    if profile.job is not None and record is not None:
        with locked(Path(record.cwd or ws.cwd)):
            return _apply_to_job(plan, record, ws, rerun=rerun)
    target = target_path(profile, ws.cwd)
    with locked(target.parent):
        return _apply_to_profile(plan, profile, record, ws, target, since=since, rerun=rerun)


class locked:
    """``edit_lock``, a directory that cannot be locked or written said in one line."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.lock = edit_lock(directory)

    def __enter__(self) -> None:
        try:
            self.lock.__enter__()
        except OSError as exc:
            raise _cannot_write(exc, self.directory) from None

    def __exit__(self, *exc: Any) -> None:
        self.lock.__exit__(*exc)


def _cannot_write(exc: OSError, where: Path) -> InputError:
    name = exc.filename or where
    return InputError(f"{name}: cannot write: {exc.strerror or exc}; nothing was written", file=str(name))


def _apply_to_profile(plan: NextPlan, profile: Profile, record: RunRecord | None, ws: Workspace, target: Path, *,
                      since: RunRecord | None, rerun: bool) -> Applied:
    chosen, cwd = plan.rung, ws.cwd
    now = load_profile_file(target, cwd=cwd, say=ws.console.error) if target.is_file() else None
    changed = _changed_since(since, now)
    if changed and since is not None and now is not None and _holds(chosen, now):
        # `fix --apply` twice on one failed run: the rung is written, only not yet tried.
        return Applied(None, (f"nothing written: {chosen.rung} is already in {target} and not yet tried; "
                              f"`gpudoc fix --rerun {since.id}` launches it",), now, target)
    if changed and since is not None:
        what = f"{target} changed since run {since.id} ({'; '.join(changed[:3])})"
        if rerun and now is not None:
            return Applied(None, (f"nothing written: {what}; relaunching with it as it is",), now, target)
        raise InputError(f"{what}: nothing written; run the job with it first, or name it with "
                         f"-p {target} to fix it anyway", file=str(target))
    before = read_bytes(target)
    try:
        path = apply_recorded(profile, chosen, cwd=cwd, store=ws.store, record=record)
    except OSError as exc:
        raise _cannot_write(exc, target) from None
    backup = path.with_name(path.name + ".gpudoc.bak")
    written = {"rung": chosen.rung, "path": str(path), "backup": str(backup) if backup.exists() else None}
    return Applied(written, _unlisted_notes(ws, profile, path, before) if record is None else (),
                   load_profile_file(path, cwd=cwd, say=ws.console.error), path)


def _unlisted_notes(ws: Workspace, profile: Profile, path: Path, before: bytes | None) -> tuple[str, ...]:
    """An edit from a log, which no run lists: where the profile as it was is kept when its first
    backup holds an earlier state, and, with no run after it to prune them, the states so kept
    beyond [runs] keep go here (``prune_unlisted``)."""
    from gpudoc.runs.edits import fingerprint, unlisted_folder
    from gpudoc.runs.retention import DEFAULT_KEEP, prune_unlisted

    notes = []
    kept = unlisted_folder(ws.store.home) / str(fingerprint(before))
    if before is not None and read_bytes(path.with_name(path.name + ".gpudoc.bak")) != before and kept.is_file():
        notes.append(f"{path} as it was is kept in {kept} (its backup holds an earlier state); no run lists "
                     "this edit, so `gpudoc restore` cannot undo it")
    try:
        said = prune_unlisted(ws.store, int(profile.runs.get("keep", DEFAULT_KEEP)))
    except OSError:
        said = None  # a read-only home: what is kept stays; the edit is what matters
    return (*notes, *([said] if said else []))


def _apply_to_job(plan: NextPlan, record: RunRecord, ws: Workspace, *, rerun: bool) -> Applied:
    """A job read from its command. With ``rerun`` nothing is written here: the relaunch writes its
    own edits, as every `gpudoc run` does. What is written is listed in the failed run's
    ``applied_edits`` (`gpudoc restore` undoes it)."""
    from gpudoc.bind import apply_file_edits
    from gpudoc.runs.edits import keep_original

    chosen = plan.rung
    command = plan.argv if plan.argv is not None else list(record.command)
    written: dict[str, Any] = {"rung": chosen.rung, "command": list(command), "env": dict(chosen.env),
                               "files": list(plan.files)}
    if rerun:
        return Applied(written, (), plan.profile)
    notes = []
    if plan.argv is not None or chosen.env:
        rerun_too = "" if record.trial_of else f"  (or `gpudoc fix --rerun {record.id}`)"  # a tune's trial is no run to redo
        notes.append(f"run next: {next_command(record, command, chosen.env)}{rerun_too}")
    done = _written_before(record, chosen.rung)
    if done and not plan.file_edits:
        # `fix --apply` twice on one failed run: the files hold the rung already, only not tried.
        return Applied(None, (f"nothing written: {chosen.rung} is already in {', '.join(done)} and not yet tried; "
                              f"`gpudoc fix --rerun {record.id}` launches it", *notes), plan.profile)
    try:
        edits = apply_file_edits(plan.bind_plan, keep=lambda data: keep_original(ws.store, data)) if plan.file_edits else []
    except OSError as exc:
        raise _cannot_write(exc, Path(record.cwd or ws.cwd)) from None
    if edits:
        record.applied_edits.extend(dict(edit, rung=chosen.rung) for edit in edits)
        ws.store.save(record)
    written["backups"] = [edit.get("backup") for edit in edits if edit.get("backup")]
    return Applied(written, tuple(notes), plan.profile)


def _written_before(record: RunRecord, rung: str) -> list[str]:
    """The files an earlier `fix --apply` on this failed run wrote ``rung`` to."""
    return list(dict.fromkeys(str(edit.get("path")) for edit in record.applied_edits
                              if isinstance(edit, dict) and edit.get("rung") == rung and edit.get("path")))


def next_command(record: RunRecord, argv: list[str], env: Mapping[str, str]) -> str:
    """The `gpudoc run` of the next attempt, with the failed run's own switches (--no-check, ...), as
    `fix --rerun` would launch it."""
    from gpudoc.commands.run_options import relaunch_switches

    options = replace(relaunch_switches(record.id, record.run_switches, record.argv), command=list(argv))
    prefix = "".join(f"{name}={shlex.quote(value)} " for name, value in env.items())
    return f"{prefix}gpudoc {shlex.join(options.to_argv())}"


def _changed_since(record: RunRecord | None, now: Profile | None) -> list[str]:
    """How the profile as it is ``now`` differs, in knobs and environment, from the one ``record`` ran with."""
    if record is None or not record.profile or now is None:
        return []
    then = record.profile
    found = []
    for table, name, current in (("knobs", "train", now.train), ("env", "env", now.env)):
        for key, old, new in table_changes(then.get(table) or {}, current):
            found.append(f"{name}.{key}: {'unset' if old is None else old} -> {'unset' if new is None else new}")
    return found


def _holds(chosen: Suggestion, now: Profile) -> bool:
    """Does the profile as it is ``now`` already carry every change of ``chosen``?"""
    return (all(now.train.get(knob) == new for knob, (_old, new) in chosen.changes.items())
            and all(now.env.get(var) == value for var, value in chosen.env.items()))


def _covers(suggestion: Suggestion, ladder: LadderResult) -> bool:
    return (suggestion.expected_saving_bytes is not None and ladder.shortfall_bytes is not None
            and suggestion.expected_saving_bytes >= ladder.shortfall_bytes)


def next_step(record: RunRecord, profile: Profile, ws: Workspace, *,
              allow_semantic: bool) -> tuple[Profile | None, Suggestion | None, tuple[str, ...]]:
    """`--retry-oom`'s step after the failed run ``record``: the ladder from the same facts as `fix`,
    its next rung written as `fix --rerun` writes it. (the profile to relaunch under, the rung,
    what was said instead of writing); no profile when no rung is left."""
    diag = record_diagnosis(record, ws.store)
    if diag is None:
        return None, None, ()
    climbed = climb(diag, profile, ws, record=record, allow_semantic=allow_semantic)
    ladder, profile = climbed.ladder, climbed.profile
    plan = plan_next(ladder, profile, record, ws.cwd)
    done = apply_next(plan, ladder, diag, profile, record, ws, since=record, rerun=True, strays_first=False)
    rung = plan.rung if plan is not None and done.profile is not None else None
    return done.profile, rung, (*climbed.notes, *done.notes)


# -- relaunched --------------------------------------------------------------------------------------

def relaunch(options: RunOptions, record: RunRecord, profile: Profile,
             ws: Workspace) -> tuple[int, RunRecord | None, tuple[str, ...]]:
    """Launch the next attempt of the failed run ``record`` under ``profile`` (resuming from the
    chain's checkpoint when it may): (its status, its record, the changed knobs that did not reach
    the job when it failed again: the ladder stops there, its next rung of them would not either)."""
    from gpudoc.commands.resume import with_resume
    from gpudoc.commands.run import launch_once

    if record.failed_oom:
        options = with_resume(options, record, profile, ws)
    status, new = launch_once(options, profile, ws, parent=record.id)
    if new is None:
        return status, None, ()
    arrival = say_arrival(record, new, profile, ws)
    lost = tuple(arrival.missing) if arrival is not None and not new.succeeded else ()
    return status, new, lost
