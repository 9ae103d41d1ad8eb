"""`gpudoc run`: resolve the command, gate, clean, bind, launch (``run_attempt``), and retry.

The launcher itself lives in ``gpudoc.launch``; this module is the flow of one `gpudoc run`
invocation and owns its exit status.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoc.commands.run_attempt import launch_attempt, refusing
from gpudoc.commands.run_options import RunOptions
from gpudoc.errors import ExitStatus, LaunchError
from gpudoc.output import Console
from gpudoc.runs.record import RunRecord
from gpudoc.workspace import Workspace

if TYPE_CHECKING:
    from gpudoc.facts.model import Facts
    from gpudoc.ladder.model import Suggestion
    from gpudoc.launch.command import ResolvedCommand
    from gpudoc.profiles.model import Profile
    from gpudoc.results.runs import DryRunResult

__all__ = ["RunOptions", "launch_once", "run"]


def run(options: RunOptions, ws: Workspace) -> int:
    """The whole of `gpudoc run`; returns the exit status (the job's, or 125/126/127/130)."""
    if not options.command:
        raise LaunchError("nothing to run: gpudoc run [SWITCHES] -- COMMAND [ARGS...]")
    from gpudoc.commands.wait import wait_limit

    wait_limit(options.wait)  # a limit that is not a time is refused before anything starts
    if options.tmux is not None:
        from gpudoc.commands.tmux import check_session_name, start_in_tmux

        check_session_name(options.tmux)
        if not options.dry_run:  # a dry run starts nothing, a tmux session included
            return start_in_tmux(options, ws)
    if options.retry_oom < 0:
        raise LaunchError("--retry-oom: expected a number of retries >= 0")

    from gpudoc.profiles.from_job import describe, with_command

    # No profile, or one without [train]: the job's own command line and configs give the knobs.
    profile = refusing(lambda: with_command(ws.load_profile(options.profile), options.command, ws.cwd, ws.environ))
    # A run with --json ends with its record as the envelope on stderr: nothing of gpudoc's own before it.
    from gpudoc.runs.reach import unreachable, wrapper_resets

    watched = not options.no_probe and profile.run.get("probe", True) is not False and not (
        unreachable(options.command) or wrapper_resets(options.command, ws.cwd))
    for line in describe(profile, observed=watched) if options.dry_run or not options.json else ():
        ws.console.error(f"gpudoc: {line}")
    from gpudoc.job.interpreter import interpreter_note

    unresolved = interpreter_note(options.command, ws.environ, str(ws.cwd))
    if unresolved:  # `uv run`/`conda run`/...: the environment's interpreter could not be told
        ws.console.error(f"gpudoc: note: {unresolved}")
    status, last = _attempts(options, profile, ws)
    if last is not None:
        _keep_history_bounded(ws, profile)
        from gpudoc.commands.notify import tell_the_end

        tell_the_end(last, profile, ws)
    return status


def _attempts(options: RunOptions, profile: Profile, ws: Workspace) -> tuple[int, RunRecord | None]:
    """Launch, and relaunch under --retry-oom through the one relaunch owner (as `fix --rerun`
    does): (the last attempt's status, its record when one ran)."""
    from gpudoc.commands.relaunch import relaunch

    console = ws.console
    status, record = launch_once(options, profile, ws, parent=None)
    if record is None or options.dry_run:
        return status, None
    attempt = 0
    while record.oom_retryable and attempt < options.retry_oom:  # else: fits, not a GPU OOM, or stopped
        attempt += 1
        new_profile, rung = _next_attempt(record, profile, options, ws)
        if new_profile is None:
            console.error("gpudoc: --retry-oom: no rung of the ladder is left to try "
                          f"(see `gpudoc fix {record.id}`)")
            return status, record
        console.error(f"gpudoc: --retry-oom {attempt}/{options.retry_oom}: {_describe_rung(rung)}; "
                      "relaunching")
        options = replace(options, attempt=attempt)
        status, new, lost = relaunch(options, record, new_profile, ws)
        if new is None:
            return status, record
        profile, record = new_profile, new
        if lost:  # the ladder stops: another rung of the same would change nothing
            console.error("gpudoc: --retry-oom stopped: the next rung would change a setting the job does not "
                          f"read (see `gpudoc fix {new.id}`)")
            return status or 1, record
    return status, record


def _keep_history_bounded(ws: Workspace, profile: Profile) -> None:
    """``[runs] keep``: once the whole chain has ended, the oldest runs beyond it go."""
    from gpudoc.runs.retention import DEFAULT_KEEP, prune_after_run

    try:
        said = prune_after_run(ws.store, int(profile.runs.get("keep", DEFAULT_KEEP)))
    except OSError:
        return  # a read-only or shared home: the history stays, the run's status is what matters
    if said:
        ws.console.error(said)


# -- resolving the command ---------------------------------------------------------------------

def resolve_command(profile: Profile, command: Sequence[str], *, cwd: Path,
                    environ: Mapping[str, str]) -> tuple[ResolvedCommand, str | None]:
    """Profile + bindings -> the ResolvedCommand (pure apart from reading the job's config files)."""
    from gpudoc import allocator
    from gpudoc.job.interpreter import target_python
    from gpudoc.launch.command import resolve

    plan = None
    if profile.path is not None or profile.job is not None:  # EMPTY: nothing to bind
        from gpudoc.bind import plan_bindings

        plan = plan_bindings(profile.for_planning(), list(command), cwd=cwd)
    python = target_python(command, environ, str(cwd))
    alloc = None
    wanted = dict(profile.env or {})
    if plan is not None:
        wanted.update(plan.env)
    if any(name in wanted for name in allocator.CUDA_NAMES):
        alloc = _alloc_env_name(python)
    return resolve(profile, command, alloc_name=alloc, plan=plan), python


def _alloc_env_name(python: str | None) -> str | None:
    from gpudoc.facts.torch_probe import alloc_env_name

    return alloc_env_name(python)


# -- one attempt -------------------------------------------------------------------------------

def launch_once(options: RunOptions, profile: Profile, ws: Workspace, *,
                parent: str | None) -> tuple[int, RunRecord | None]:
    """Gate, clean, bind, launch and record one attempt. Returns (status, record or None)."""
    console, cwd, environ = ws.console, ws.cwd, ws.environ
    command = options.command
    if options.resume is not None:  # a relaunch resuming from a checkpoint: the framework's switch
        from gpudoc.job.checkpoints import resume_command

        command = resume_command(command, options.resume["switch"])
    resolved, python = refusing(lambda: resolve_command(profile, command, cwd=cwd, environ=environ))
    if options.dry_run:
        from gpudoc.render.show import show

        return show(_dry_run_result(resolved, profile), console, as_json=options.json), None
    child_env = resolved.child_env(environ)
    facts = None
    if not options.no_check:
        facts, child_env = refusing(lambda: _gate(profile, python, child_env, ws, force=options.force,
                                                  wait=options.wait))
    if options.clean or bool(profile.run.get("clean", False)):
        refusing(lambda: _clean(facts, ws, child_env, yes=options.yes))
    _check_executable(resolved.argv, child_env, cwd)
    for note in (*resolved.conflicts, *resolved.notes):
        console.error(f"gpudoc: note: {note}")
    edits = refusing(lambda: _apply_edits(resolved, ws))
    for line in _said(resolved, ws, parent):  # a flag the user typed, a value in a file: never changed unsaid
        console.error(f"gpudoc: {line}")
    return launch_attempt(options, profile, resolved, child_env, edits, ws, parent=parent)


def _said(resolved: ResolvedCommand, ws: Workspace, parent: str | None) -> tuple[str, ...]:
    """The changes to say: at a relaunch, from what the attempt it relaunches ran."""
    earlier = ws.store.record_or_none(parent) if parent is not None and resolved.plan is not None else None
    return tuple(resolved.plan.said(before=earlier.argv)) if earlier is not None and earlier.argv else resolved.said


def _dry_run_result(resolved: ResolvedCommand, profile: Profile) -> DryRunResult:
    """With no profile, every knob read from the job is a binding too: the flag, override or config
    key it lives in (``where``), as the record's ``profile.knobs`` will say; the planner's own
    entries (a knob gpudoc changes) come first."""
    from gpudoc.results.runs import DryRunResult

    doc = resolved.to_dict()
    bindings = list(resolved.bindings)
    if profile.job is not None:
        planned = {b.get("knob") for b in bindings}
        bindings += [b for b in profile.job.read_bindings(profile.train) if b["knob"] not in planned]
    return DryRunResult(argv=tuple(doc["command"]), env_set=doc["env_set"], file_edits=tuple(doc["file_edits"]),
                        notes=(*resolved.conflicts, *resolved.notes), bindings=tuple(bindings))


def _gate(profile: Profile, python: str | None, child_env: Mapping[str, str], ws: Workspace, *,
          force: bool, wait: str | None = None) -> tuple[Facts, dict[str, str]]:
    """The pre-flight checks, as `gpudoc check` runs them; the facts and the job's environment (with
    ``--wait`` it may name the GPUs that have the memory). Refuses (125) when a check fails."""
    from gpudoc.checks import run_checks
    from gpudoc.checks._common import CheckContext
    from gpudoc.checks.memory import freeing_helps, freest_gpus, lacks_free_memory
    from gpudoc.commands.wait import wait_for_memory, wait_limit, waitable
    from gpudoc.facts.gather import seen_with
    from gpudoc.findings import Severity

    console = ws.console
    alloc = _alloc_env_name(python)
    limit = wait_limit(wait)
    estimates: list = []  # the job's estimate once: a wait re-reads the GPUs, not the model
    env: list[Mapping[str, str]] = [child_env]
    # The user's own choice of GPUs stands; without one, a wait may take the GPUs that are free.
    may_choose = limit is not None and "CUDA_VISIBLE_DEVICES" not in child_env

    def evaluate() -> tuple[Facts, list, bool]:
        facts = ws.gather(python=python, environ=child_env)
        if not estimates:
            estimates.append(ws.estimate(profile, facts, python=python))
        ctx = CheckContext(estimate=estimates[0])
        env[0] = child_env
        # The GPUs are chosen from the facts before the checks run, so that they run once a poll,
        # on the GPUs the job gets: other GPUs only when its own lack the memory, seen in the same
        # snapshot (one read of the driver).
        chosen = freest_gpus(facts, profile, ctx) if may_choose and lacks_free_memory(facts, profile, ctx) else None
        if chosen is not None:
            env[0] = {**child_env, "CUDA_VISIBLE_DEVICES": ",".join(str(g.uuid) for g in chosen)}
            facts = seen_with(facts, env[0])
        findings = run_checks(facts, profile, alloc_env_name=alloc, profile_label=profile.name, estimate=ctx.estimate)
        return facts, findings, freeing_helps(facts, profile, ctx)

    facts, findings, helps = evaluate()
    if limit is not None and not force and waitable(findings, helps):
        facts, findings = wait_for_memory(evaluate, limit, console.err)  # type: ignore[assignment]
    if env[0] is not child_env:
        console.error(f"gpudoc: --wait: the job runs on the GPUs with the memory free: "
                      f"CUDA_VISIBLE_DEVICES={env[0]['CUDA_VISIBLE_DEVICES']}")
    failed = [f for f in findings if f.severity is Severity.FAIL]
    shown = [f for f in findings if f.severity in (Severity.FAIL, Severity.WARN, Severity.ERROR)]
    if shown:
        from gpudoc.render.findings_text import render_findings

        render_findings(shown, Console(out=console.err, err=console.err, colour=console.colour))
        console.err.flush()
    if failed and not force:
        raise LaunchError(f"pre-flight checks failed ({', '.join(f.id for f in failed)}): not launching "
                          "(--force launches anyway, --no-check skips the checks"
                          + (", --wait waits for free memory)" if limit is None and waitable(findings, helps) else ")"))
    if failed:
        console.error("gpudoc: --force: launching despite the failed checks")
    return facts, dict(env[0])


def _clean(facts: Facts | None, ws: Workspace, child_env: Mapping[str, str], *, yes: bool) -> None:
    """`--clean`: the `gpudoc clean` flow on the job's GPUs, talking on stderr (stdout is the job's)."""
    from gpudoc.commands.clean import clean
    from gpudoc.job.identity import visible_selection

    console = ws.console
    current = facts if facts is not None else ws.gather()
    if current.nvml_error or not current.gpus:
        console.error(f"gpudoc: --clean: no GPU processes to look at ({current.nvml_error or 'no GPU visible'})")
        return
    indices, _ = visible_selection(child_env)
    on_stderr = ws.but(console=Console(out=console.err, err=console.err, colour=console.colour))
    status = clean(on_stderr, gpus=",".join(map(str, sorted(indices))) if indices else None, yes=yes)
    if status != 0:
        raise LaunchError("--clean did not finish (see above): not launching")


def _check_executable(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
    """127/126 with the command's name before anything is recorded (Popen would say the same,
    less clearly)."""
    first = argv[0]
    if os.sep in first:
        path = first if os.path.isabs(first) else str(cwd / first)
        if not os.path.exists(path):
            raise LaunchError(f"command not found: {first}", exit_status=ExitStatus.NOT_FOUND)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise LaunchError(f"command not executable: {first} (permission denied)",
                              exit_status=ExitStatus.NOT_EXECUTABLE)
        return
    if shutil.which(first, path=env.get("PATH", os.defpath)) is None:
        # which() skips files without the execute bit: tell "missing" from "not executable".
        for directory in env.get("PATH", os.defpath).split(os.pathsep):
            candidate = os.path.join(directory or ".", first)
            if os.path.isfile(candidate):
                raise LaunchError(f"command not executable: {candidate} (permission denied)",
                                  exit_status=ExitStatus.NOT_EXECUTABLE)
        raise LaunchError(f"command not found: {first}", exit_status=ExitStatus.NOT_FOUND)


def _apply_edits(resolved: ResolvedCommand, ws: Workspace) -> list[dict]:
    if not resolved.file_edits:
        return []
    from gpudoc.bind import apply_file_edits
    from gpudoc.commands.relaunch import locked
    from gpudoc.runs.edits import keep_original

    # Under the edit lock `fix --apply` holds (``relaunch.apply_next``): a relaunch writing the job's
    # config files and an apply editing them never interleave. The bytes before each edit stay in
    # the run store: `gpudoc restore` brings them back.
    with locked(ws.cwd):
        return list(apply_file_edits(resolved.plan, keep=lambda data: keep_original(ws.store, data)))


# -- the summary ------------------------------------------------------------------------------

def _describe_rung(rung: Suggestion | None) -> str:
    if rung is None:
        return "next rung"
    parts = [f"{k} {old} -> {new}" for k, (old, new) in rung.changes.items()] + [f"{k}={v}" for k, v in rung.env.items()]
    return rung.rung + (f" ({', '.join(parts)})" if parts else "")


def _next_attempt(record: RunRecord, profile: Profile, options: RunOptions,
                  ws: Workspace) -> tuple[Profile | None, Suggestion | None]:
    from gpudoc.commands.relaunch import next_step

    allow = options.allow_semantic or profile.allow_semantic
    new_profile, rung, said = refusing(lambda: next_step(record, profile, ws, allow_semantic=allow))
    for line in said:
        ws.console.error(f"gpudoc: --retry-oom: {line}")
    return new_profile, rung
