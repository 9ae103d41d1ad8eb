"""`gpudoc fix`: say what went wrong, propose the next rungs of the tuning ladder, apply, rerun.

Flow: sources (run records, log files, stdin) -> diagnosis -> profile -> the ladder, planned,
written and relaunched by the one owner ``gpudoc.commands.relaunch`` (as `run --retry-oom` is) ->
result -> ``gpudoc.render``. A knob that did not reach the job gets no further rung.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoc.commands.fix_sources import Source, diagnose_source, first_failure, read_sources, role
from gpudoc.commands.relaunch import Applied, NextPlan, apply_next, climb, plan_next, relaunch
from gpudoc.commands.retry import how_to_bind
from gpudoc.commands.run_options import RunOptions, relaunch_switches
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.errors import ExitStatus, UsageError
from gpudoc.ladder.model import LadderResult
from gpudoc.profiles.edit import target_path
from gpudoc.profiles.loader import load_profile_file
from gpudoc.profiles.model import Profile
from gpudoc.render.show import show
from gpudoc.results.fix import FixResult, NodeView
from gpudoc.runs.record import RunRecord
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

    climbed = climb(diag, _profile(ws, profile_name, record), ws, record=record, allow_semantic=allow_semantic,
                    facts=facts, estimate=estimate)
    ladder, unreached, profile = climbed.ladder, climbed.unreached, climbed.profile
    plan = _plan(ladder, profile, record, ws)
    done = Applied(None)
    if apply or rerun:
        # An explicit -p is the user's choice of profile; otherwise the run's own must not have moved on.
        done = apply_next(plan, ladder, diag, profile, record, ws, since=None if profile_name else record, rerun=rerun)
    applied = done.written
    relaunch = (_rerun_options(record, done.profile_path, allow_semantic)
                if rerun and done.profile is not None and record else None)
    answer = ExitStatus.OK if ladder.suggestions and not (rerun and applied is None) else ExitStatus.NEGATIVE
    result = FixResult(
        diagnosis=diag, ladder=ladder, source=sources[chosen_index].label,
        run_id=record.id if record is not None else None, job_id=record.job_id if record is not None else None,
        profile_path=str(profile.path) if profile.path else None, profile_env=dict(profile.env),
        knob_places=profile.job.places if profile.job is not None else {},
        target_path=str(target_path(profile, cwd)), exit_code=answer, applied=applied,
        notes=(*climbed.notes, *_arrival_notes(unreached, profile), *ladder.notes, *done.notes),
        next=plan.to_dict() if plan is not None else None,
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
        shown = list(applied["command"]) if profile.job is not None and applied and applied.get("command") else None
        return _relaunch(ws, relaunch, record, quiet=as_json, profile=done.profile, shown_command=shown)
    return answer


def _arrival_notes(unreached: dict[str, tuple[str, str]], profile: Profile) -> list[str]:
    """A relaunch whose changes did not reach the job: the next rung of the same knob would not either."""
    return [f"{knob} did not reach the job in run {run} ({why}): no rung of it is proposed until the job "
            f"reads it; {how_to_bind(profile, knob)}" for knob, (run, why) in unreached.items()]


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
    if record is not None:  # a job read from its command, alone or under a profile without [train]
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


def _plan(ladder: LadderResult, profile: Profile, record: RunRecord | None, ws: Workspace) -> NextPlan | None:
    """The next relaunch, as `--apply` would write it (``next`` in the JSON)."""
    if not ladder.suggestions:
        return None
    return plan_next(ladder, profile, record, ws.cwd)


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
    status, new, lost = relaunch(options, record, profile, ws)
    if new is not None and lost:
        # As --retry-oom stops: `gpudoc fix` on this run proposes no further rung of these knobs.
        console.error(f"gpudoc: the ladder stops at {', '.join(lost)}: its next rung would change "
                      f"a setting the job does not read (`gpudoc fix {new.id}` proposes the rest)")
    return int(status)
