"""`gpudoc fix`: say what went wrong, propose the next rungs of the tuning ladder, apply, rerun.

Flow: sources (run records, log files, stdin) -> diagnosis -> profile -> ladder -> result ->
``gpudoc.render``; with --apply, the first profile-changing rung is written; with --rerun, the
recorded command is relaunched under it, and whether its change reached the job is checked as
--retry-oom checks it (``retry.say_arrival``). A knob that did not reach the job gets no further rung.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.atomic import edit_lock
from gpudoc.commands.fix_sources import Source, diagnose_source, first_failure, read_sources, role
from gpudoc.commands.retry import how_to_bind, job_torch_facts, unreached_knobs
from gpudoc.commands.run_options import RunOptions, relaunch_switches
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.errors import ExitStatus, InputError, UsageError
from gpudoc.ladder import suggest, upward_result
from gpudoc.ladder.arrival import without_unreached
from gpudoc.ladder.model import LadderResult, Suggestion
from gpudoc.profiles.edit import apply_recorded, target_path
from gpudoc.profiles.loader import load_profile_file
from gpudoc.profiles.model import Profile
from gpudoc.render.show import show
from gpudoc.results.fix import FixResult, NodeView
from gpudoc.runs.record import RunRecord, changes
from gpudoc.workspace import Workspace

if TYPE_CHECKING:
    from gpudoc.estimate import Estimate
    from gpudoc.facts.model import Facts


def fix(
    ws: Workspace,
    *,
    targets: Sequence[str] = (),
    logs: Sequence[str] = (),
    profile_name: str | None = None,
    apply: bool = False,
    rerun: bool = False,
    allow_semantic: bool = False,
    as_json: bool = False,
    facts: Facts | None = None,
    estimate: Estimate | None = None,
) -> int:
    """Diagnose, propose, and with ``apply``/``rerun`` act. 0 with a suggestion, 1 without; with
    --rerun, the relaunched job's status."""
    store, cwd = ws.store, ws.cwd
    sources = read_sources(targets, logs, store, ws.stdin, cwd)
    diagnoses = [diagnose_source(s, store) for s in sources]
    chosen_index, diag = first_failure(sources, diagnoses, store)
    record = sources[chosen_index].record
    if rerun and record is None:
        raise UsageError("--rerun needs a run record (it relaunches the recorded command); give a RUN_ID, not a log")
    if rerun and len({s.record.id for s in sources if s.record is not None}) > 1:
        # One node's part alone would wait at the rendezvous for the others forever.
        raise UsageError(
            f"--rerun relaunches one run, but {len(sources)} runs were read (one job's nodes): use --apply, then "
            "start the job again on every node (srun ... gpudoc run ...)"
        )

    profile = _profile(ws, profile_name, record)
    if facts is None and record is not None:
        # This machine's facts only describe the job when it ran here.
        facts = _local_facts(ws, record) if record.host == socket.gethostname() else job_torch_facts(record, ws.environ)
    history = ws.history(profile, upto=record)
    weigh: Any = estimate
    if estimate is None and profile.model:
        from gpudoc.estimate.simulated import simulate_enabled

        if simulate_enabled(profile):  # each rung's saving is simulated too (cached per knob set)
            weigh = ws.estimator(profile, command=record.command if record is not None else None)
    if diag.cause == "ok" and record is not None:
        ladder = upward_result(profile, record, facts, estimate=weigh, history=history)
    else:
        ladder = suggest(diag, profile, facts, history, allow_semantic=allow_semantic, estimate=weigh)
    unreached = unreached_knobs(record, ws.store) if record is not None else {}
    ladder = without_unreached(ladder, {knob: f"run {run}: {why}" for knob, (run, why) in unreached.items()})

    next_job: Profile | None = None
    if profile.job is not None and record is not None and (apply or rerun):
        from gpudoc.commands.fix_job import apply_to_job

        applied, notes, next_job = apply_to_job(ladder, profile, record, rerun=rerun, store=ws.store)
        next_profile = None
    else:
        # An explicit -p is the user's choice of profile; otherwise the run's own must not have moved on.
        applied, notes, next_profile = (_apply(ladder, diag, profile, ws, since=None if profile_name else record,
                                               rerun=rerun, record=record) if apply or rerun else (None, [], None))
    relaunch = (_rerun_options(record, next_profile, allow_semantic) if rerun and (next_profile or next_job) and record
                else None)
    answer = ExitStatus.OK if ladder.suggestions and not (rerun and applied is None) else ExitStatus.NEGATIVE
    result = FixResult(
        diagnosis=diag, ladder=ladder, source=sources[chosen_index].label,
        run_id=record.id if record is not None else None, job_id=record.job_id if record is not None else None,
        profile_path=str(profile.path) if profile.path else None, profile_env=dict(profile.env),
        knob_places=profile.job.places if profile.job is not None else {},
        target_path=str(target_path(profile, cwd)), exit_code=answer, applied=applied,
        notes=(*_arrival_notes(unreached, profile), *ladder.notes, *notes),
        rerun={"command": ["gpudoc", *relaunch.to_argv()], "parent": record.id, "cwd": record.cwd}
        if relaunch and record else None,
        nodes=_nodes(sources, diagnoses, chosen_index) if len(sources) > 1 else (),
    )
    # With --rerun the process then exits with the relaunched job's status; the result (and its
    # JSON) describes fix's own answer.
    show(result, ws.console, as_json=as_json)
    if relaunch is not None and record is not None:
        # A job read from its command: the relaunch writes the rung into its flags, so say the
        # command as it will run, not as it was typed.
        shown = list(applied["command"]) if next_job is not None and applied and applied.get("command") else None
        return _relaunch(ws, relaunch, record, quiet=as_json, profile=next_job, shown_command=shown)
    return answer


def _apply(ladder: LadderResult, diag: Diagnosis, profile: Profile, ws: Workspace, *, since: RunRecord | None,
           rerun: bool, record: RunRecord | None) -> tuple[dict[str, Any] | None, list[str], Path | None]:
    """Write the first rung that changes the profile: (what was written, notes, the profile a
    relaunch takes). Under the edit lock, and only while the profile is still the one run
    ``since`` used: a second apply on one failed run would stack a rung nobody tried."""
    chosen = ladder.first_profile_change()
    strays = ladder.suggestions[0] if ladder.suggestions and not ladder.suggestions[0].changes_profile else None
    if strays is not None and _covers(strays, ladder):
        gpu = f" --gpus {diag.gpu_index}" if diag.gpu_index is not None else ""
        return None, ["nothing written: the memory other processes held covers the shortfall; free it first "
                      f"(`gpudoc clean{gpu}`, or relaunch with `gpudoc run --clean`)"], None
    if chosen is None:
        return None, ["nothing written: no rung changes the profile"], None
    cwd = ws.cwd
    target = target_path(profile, cwd)
    try:
        with edit_lock(target.parent):
            now = load_profile_file(target, cwd=cwd, say=ws.console.error) if target.is_file() else None
            changed = _changed_since(since, now)
            if changed and since is not None and now is not None and _holds(chosen, now):
                # `fix --apply` twice on one failed run: the rung is written, only not yet tried.
                return None, [f"nothing written: {chosen.rung} is already in {target} and not yet tried; "
                              f"`gpudoc fix --rerun {since.id}` launches it"], target
            if changed and since is not None:
                what = f"{target} changed since run {since.id} ({'; '.join(changed[:3])})"
                if rerun:
                    return None, [f"nothing written: {what}; relaunching with it as it is"], target
                raise InputError(f"{what}: nothing written; run the job with it first, or name it with "
                                 f"-p {target} to fix it anyway", file=str(target))
            path = apply_recorded(profile, chosen, cwd=cwd, store=ws.store, record=record)
    except OSError as exc:
        raise InputError(f"{exc.filename or target}: cannot write: {exc.strerror or exc}; nothing was written",
                         file=str(exc.filename or target)) from None
    backup = path.with_name(path.name + ".gpudoc.bak")
    return {"rung": chosen.rung, "path": str(path), "backup": str(backup) if backup.exists() else None}, [], path


def _changed_since(record: RunRecord | None, now: Profile | None) -> list[str]:
    """How the profile as it is ``now`` differs, in knobs and environment, from the one ``record`` ran with."""
    if record is None or not record.profile or now is None:
        return []
    then = record.profile
    found = []
    for table, name, current in (("knobs", "train", now.train), ("env", "env", now.env)):
        for key, old, new in changes(then.get(table) or {}, current):
            found.append(f"{name}.{key}: {'unset' if old is None else old} -> {'unset' if new is None else new}")
    return found


def _holds(chosen: Suggestion, now: Profile) -> bool:
    """Does the profile as it is ``now`` already carry every change of ``chosen``?"""
    return (all(now.train.get(knob) == new for knob, (_old, new) in chosen.changes.items())
            and all(now.env.get(var) == value for var, value in chosen.env.items()))


def _arrival_notes(unreached: dict[str, tuple[str, str]], profile: Profile) -> list[str]:
    """A relaunch whose changes did not reach the job: the next rung of the same knob would not either."""
    return [f"{knob} did not reach the job in run {run} ({why}): no rung of it is proposed until the job "
            f"reads it; {how_to_bind(profile, knob)}" for knob, (run, why) in unreached.items()]


def _covers(suggestion: Suggestion, ladder: LadderResult) -> bool:
    return (suggestion.expected_saving_bytes is not None and ladder.shortfall_bytes is not None
            and suggestion.expected_saving_bytes >= ladder.shortfall_bytes)


def _nodes(sources: list[Source], diagnoses: list[Diagnosis], chosen: int) -> tuple[NodeView, ...]:
    return tuple(
        NodeView(source=s.label, node=s.node, host=(s.record.host if s.record else None) or d.host,
                 node_rank=s.record.node_rank if s.record else None, run_id=s.record.id if s.record else None,
                 cause=d.cause, rank=d.rank, gpu_index=d.gpu_index,
                 role="first_failure" if i == chosen else role(d),
                 ended_by_gpudoc=bool(s.record and s.record.ended_by))
        for i, (s, d) in enumerate(zip(sources, diagnoses))
    )


def _profile(ws: Workspace, name: str | None, record: RunRecord | None) -> Profile:
    """``-p``, else the profile the run was launched with (its knobs and environment as they were
    in that run: the ladder climbs from what was tried, not from an edit not yet tried), else
    ``./gpudoc.toml``."""
    if name:
        return ws.load_profile(name)
    if record is not None and record.profile_path is None:
        from gpudoc.profiles.from_job import recorded_job_profile

        job = recorded_job_profile(record, ws.environ)
        if job is not None:
            return job
    if record is not None and record.profile_path:
        candidate = Path(record.profile_path)
        if not candidate.is_absolute():
            candidate = Path(record.cwd) / candidate
        if candidate.is_file():
            ran = record.profile or {}
            return replace(load_profile_file(candidate, cwd=ws.cwd, say=ws.console.error), train=record.knobs or {},
                           env={str(k): str(v) for k, v in dict(ran.get("env") or {}).items()})
    return ws.load_profile(None)


def _local_facts(ws: Workspace, record: RunRecord) -> Facts | None:
    """Facts of this machine for the rungs that care (bf16 support, host RAM, allocator name).

    Optional: when the facts layer cannot answer, the ladder works from the profile alone.
    """
    try:
        facts = ws.gather(deep=False)
    except Exception:  # facts only refine the suggestions
        return None
    job = job_torch_facts(record, ws.environ)
    if job is not None and job.torch is not None:
        torch = facts.torch or job.torch
        facts = replace(facts, torch=replace(torch, alloc_env_name=job.torch.alloc_env_name))
    return facts


def _rerun_options(record: RunRecord, profile_path: Path | None, allow_semantic: bool) -> RunOptions:
    """The relaunch: the recorded command, as the user launched it (same switches), under the
    new profile (none for a job read from its command: it carries its changes itself)."""
    command = list(record.command or [])
    if not command:
        raise UsageError(f"run {record.id} recorded no command to relaunch")
    options = replace(relaunch_switches(record.id, record.run_switches, record.argv), command=command,
                      profile=str(profile_path) if profile_path is not None else None)
    if allow_semantic:
        options.allow_semantic = True
    return options


def _relaunch(ws: Workspace, options: RunOptions, record: RunRecord, *, quiet: bool,
              profile: Profile | None = None, shown_command: list[str] | None = None) -> int:
    """Launch it as a new run whose parent is the failed one; its exit status is fix's."""
    from gpudoc.commands.run import launch_once

    console = ws.console
    if record.cwd and Path(record.cwd).is_dir():
        ws = ws.but(cwd=Path(record.cwd))
    shown = replace(options, command=shown_command) if shown_command else options
    line = f"Relaunching in {ws.cwd}: gpudoc {shlex.join(shown.to_argv())}"
    # With --json, stdout holds the one JSON object (the job's own output follows it there).
    if quiet:
        console.error(line)
    else:
        console.print(line)
    console.flush()
    if profile is None:
        profile = load_profile_file(Path(str(options.profile)), cwd=ws.cwd, say=ws.console.error)
    if record.failed_oom:
        from gpudoc.commands.resume import with_resume

        options = with_resume(options, record, profile, ws)
    status, new = launch_once(options, profile, ws, parent=record.id)
    if new is not None:
        from gpudoc.commands.retry import say_arrival

        arrival = say_arrival(record, new, profile, ws)
        if arrival is not None and arrival.missing and not new.succeeded:
            # As --retry-oom stops: `gpudoc fix` on this run proposes no further rung of these knobs.
            console.error(f"gpudoc: the ladder stops at {', '.join(arrival.missing)}: its next rung would change "
                          f"a setting the job does not read (`gpudoc fix {new.id}` proposes the rest)")
    return int(status)
