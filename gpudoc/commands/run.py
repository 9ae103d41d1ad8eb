"""`gpudoc run`: gate, clean, apply the profile, launch, watch, record, summarise (and retry).

The launcher itself lives in ``gpudoc.launch``; this module wires it to profiles, checks, bindings,
diagnosis, the ladder and the run records, and owns the exit status.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.commands.run_options import RunOptions
from gpudoc.errors import ExitStatus, GpudocError, LaunchError
from gpudoc.output import Console
from gpudoc.render.show import show
from gpudoc.results import DryRunResult, RunResult
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.workspace import Workspace

if TYPE_CHECKING:
    from gpudoc.facts.model import Facts
    from gpudoc.launch.command import ResolvedCommand
    from gpudoc.profiles.model import Profile

__all__ = ["RunOptions", "launch_once", "run"]

# The diagnosis reads the end of the log: a failure is near the end, and a 12-hour log can be huge.
TAIL_BYTES = 2 * 1024 * 1024
DEFAULT_OOM_GRACE_S = 5.0
DEFAULT_SAMPLE_INTERVAL_S = 1.0
DEFAULT_TERM_GRACE_S = 10.0
_KEEP_EVENT_LINES = 20


def run(options: RunOptions, ws: Workspace) -> int:
    """The whole of `gpudoc run`; returns the exit status (the job's, or 125/126/127/130)."""
    console = ws.console
    if not options.command:
        raise LaunchError("nothing to run: gpudoc run [SWITCHES] -- COMMAND [ARGS...]")
    if options.tmux:
        return start_in_tmux(options, ws)
    if options.retry_oom < 0:
        raise LaunchError("--retry-oom: expected a number of retries >= 0")

    profile = _refusing(lambda: ws.load_profile(options.profile))
    parent: str | None = None
    attempt = 0
    while True:
        status, record = launch_once(options, profile, ws, parent=parent)
        if record is None or options.dry_run:
            return status
        if record.cause != "gpu_oom" or attempt >= options.retry_oom or record.status == "interrupted":
            return status  # fits, not a GPU OOM, no retries left, or the user stopped it
        attempt += 1
        new_profile, rung = _next_attempt(record, profile, options, ws)
        if new_profile is None:
            console.error("gpudoc: --retry-oom: no rung of the ladder is left to try "
                          f"(see `gpudoc fix {record.id}`)")
            return status
        console.error(f"gpudoc: --retry-oom {attempt}/{options.retry_oom}: {_describe_rung(rung)}; "
                      "relaunching")
        profile, parent = new_profile, record.id


def _refusing(func):
    """Anything that stops `run` before launch exits 125, so it cannot be mistaken for the job's."""
    try:
        return func()
    except LaunchError:
        raise
    except GpudocError as exc:
        raise LaunchError(str(exc).removeprefix("gpudoc: ")) from None


# -- resolving the command ---------------------------------------------------------------------

def resolve_command(profile, command: Sequence[str], *, cwd: Path, environ: Mapping[str, str]):
    """Profile + bindings -> the ResolvedCommand (pure apart from reading the job's config files)."""
    from gpudoc.launch.command import ALLOC_NAMES, resolve
    from gpudoc.launch.interpreter import target_python

    plan = None
    if getattr(profile, "path", None) is not None:  # no profile: nothing to bind
        from gpudoc.bind import plan_bindings

        plan = plan_bindings(profile, list(command), cwd=cwd)
    python = target_python(command, environ)
    alloc = None
    wanted = dict(profile.env or {})
    if plan is not None:
        wanted.update(plan.env)
    if any(name in wanted for name in ALLOC_NAMES):
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
    resolved, python = _refusing(lambda: resolve_command(profile, options.command, cwd=cwd, environ=environ))
    if options.dry_run:
        return show(_dry_run_result(resolved), console, as_json=options.json), None
    child_env = resolved.child_env(environ)
    facts = None
    if not options.no_check:
        facts = _refusing(lambda: _gate(profile, python, child_env, ws, force=options.force))
    if options.clean or bool(profile.run.get("clean", False)):
        _refusing(lambda: _clean(facts, ws, child_env, yes=options.yes))
    _check_executable(resolved.argv, child_env, cwd)
    for note in (*resolved.conflicts, *resolved.notes):
        console.error(f"gpudoc: note: {note}")
    edits = _refusing(lambda: _apply_edits(resolved))
    return _launch(options, profile, resolved, child_env, edits, ws, parent=parent)


def _dry_run_result(resolved: ResolvedCommand) -> DryRunResult:
    doc = resolved.to_dict()
    return DryRunResult(argv=tuple(doc["command"]), env_set=doc["env_set"], file_edits=tuple(doc["file_edits"]),
                        notes=(*resolved.conflicts, *resolved.notes))


def _gate(profile: Profile, python: str | None, child_env: Mapping[str, str], ws: Workspace, *,
          force: bool) -> Facts:
    from gpudoc.checks import run_checks
    from gpudoc.findings import Severity

    console = ws.console
    facts = ws.gather(python=python, environ=child_env)
    alloc = _alloc_env_name(python)
    # The same figure `gpudoc check` uses, so the gate and the doctor never disagree.
    findings = run_checks(facts, profile, runs=ws.store, alloc_env_name=alloc, profile_label=profile.name,
                          estimate=ws.estimate(profile, facts))
    failed = [f for f in findings if f.severity is Severity.FAIL]
    shown = [f for f in findings if f.severity in (Severity.FAIL, Severity.WARN, Severity.ERROR)]
    if shown:
        from gpudoc.render.findings_text import render_findings

        render_findings(shown, Console(out=console.err, err=console.err, colour=console.colour))
        console.err.flush()
    if failed and not force:
        raise LaunchError(f"pre-flight checks failed ({', '.join(f.id for f in failed)}): not launching "
                          "(--force launches anyway, --no-check skips the checks)")
    if failed:
        console.error("gpudoc: --force: launching despite the failed checks")
    return facts


def _clean(facts: Facts | None, ws: Workspace, child_env: Mapping[str, str], *, yes: bool) -> None:
    """`--clean`: the `gpudoc clean` flow on the job's GPUs, talking on stderr (stdout is the job's)."""
    from gpudoc.commands.clean import clean
    from gpudoc.launch.watch import visible_selection

    console, store, gather = ws.console, ws.store, ws.gather
    current = facts if facts is not None else gather(runs=store)
    if current.nvml_error or not current.gpus:
        console.error(f"gpudoc: --clean: no GPU processes to look at ({current.nvml_error or 'no GPU visible'})")
        return
    indices, _ = visible_selection(child_env)
    err = Console(out=console.err, err=console.err, colour=console.colour)
    status = clean(err, gpus=",".join(map(str, sorted(indices))) if indices else None, yes=yes, runs=store,
                   gather=gather, stdin=ws.stdin)
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


def _apply_edits(resolved) -> list[dict]:
    if not resolved.file_edits:
        return []
    from gpudoc.bind import apply_file_edits

    return list(apply_file_edits(resolved.plan))


# -- the launch itself ------------------------------------------------------------------------

@dataclass
class _Watch:
    """What the output stream told us while the job ran (bounded)."""

    multi_process: bool
    oom_grace_s: float
    first_oom: Any = None
    event_lines: list[str] = field(default_factory=list)
    ranks: set = field(default_factory=set)


def _launch(options: RunOptions, profile: Profile, resolved: ResolvedCommand, child_env: dict[str, str],
            edits: list[dict], ws: Workspace, *, parent: str | None) -> tuple[int, RunRecord]:
    from gpudoc.launch.command import is_multi_process, job_identity
    from gpudoc.launch.scan import LiveScan
    from gpudoc.launch.spawn import Launcher, LaunchOptions
    from gpudoc.launch.watch import GpuSampler, SamplerThread, nvml_reader
    from gpudoc.runs.store import new_run_id

    console, cwd, store, nvml_backend = ws.console, ws.cwd, ws.store, ws.nvml_backend
    run_id = new_run_id()
    identity = job_identity(resolved.argv, child_env)
    record = RunRecord(
        id=run_id, command=list(options.command), cwd=str(cwd), profile=_profile_doc(profile),
        env_set=dict(resolved.env_set), file_edits=edits, started_at=now_iso(), parent=parent,
        job_id=identity.job_id, node_rank=node_rank(identity, resolved.argv, child_env),
        launcher_pid=os.getpid(), user=_user(),
    )
    record.argv = list(resolved.argv)
    record.run_switches = options.switches()
    child_env = dict(child_env, GPUDOC_RUN_ID=run_id)
    _refusing(store.ensure)  # an unwritable runs directory refuses the launch, before it
    run_dir = store.run_dir(run_id)
    log_path = store.log_path(run_id)

    watch = _Watch(multi_process=is_multi_process(resolved.argv, profile),
                   oom_grace_s=float(profile.run.get("oom_grace_s", DEFAULT_OOM_GRACE_S)))
    sampler = GpuSampler(store.samples_path(run_id), reader_factory=lambda: nvml_reader(nvml_backend),
                         environ=child_env)
    thread = SamplerThread(sampler, float(profile.run.get("sample_interval_s", DEFAULT_SAMPLE_INTERVAL_S)))
    state = {"pids": {}}

    def on_start(pid: int, pgid: int) -> None:
        # The record appears with the job's PID and group in it: a `gpudoc clean` after a crash
        # of gpudoc itself can still tell the job's processes.
        record.process_group = pgid
        from gpudoc.launch.reaper import proc_create_time

        _merge_pids(record, state, [(pid, proc_create_time(pid))])
        store.create(record)
        sampler.job_pids = lambda: list(state["pids"])
        thread.start()

    launcher: Launcher | None = None

    def on_events(events) -> None:
        for event in events:
            if len(watch.event_lines) < _KEEP_EVENT_LINES:
                watch.event_lines.append(getattr(event, "line", "") or "")
            rank = getattr(event, "rank", None)
            if rank is not None:
                watch.ranks.add(rank)
            if getattr(event, "cause", None) == "gpu_oom" and watch.first_oom is None:
                watch.first_oom = event
                if sync is not None:
                    sync.announce("gpu_oom", rank=rank, line=getattr(event, "line", "") or "")
                multi = watch.multi_process or len(watch.ranks) > 1 or rank is not None
                if multi and watch.oom_grace_s >= 0 and launcher is not None:
                    where = f" on rank {rank}" if rank is not None else ""
                    launcher.warn(f"GPU out of memory{where}: ending the whole job in "
                                  f"{watch.oom_grace_s:g} s unless it ends by itself")
                    launcher.request_end("gpu_oom", watch.oom_grace_s)

    def on_tick(launch: Launcher) -> None:
        procs = launch.processes()
        if _merge_pids(record, state, [(p.pid, p.create_time) for p in procs]):
            store.save(record)
        if sync is not None and not launch.end_requested and not sync.announced:
            elsewhere = sync.failures_elsewhere()
            if elsewhere:
                first = elsewhere[0]
                where = f"{first.get('host')}" + (f" rank {first['rank']}" if first.get("rank") is not None else "")
                launch.warn(f"job {identity.job_id}: GPU out of memory on {where} (run {first.get('run_id')}): "
                            f"ending this node's part in {max(watch.oom_grace_s, 0):g} s")
                launch.request_end(f"gpu_oom elsewhere ({first.get('host')}, run {first.get('run_id')})",
                                   max(watch.oom_grace_s, 0))

    term_grace = _env_float(child_env, "GPUDOC_TERM_GRACE_S", DEFAULT_TERM_GRACE_S)
    live = LiveScan(log_path, on_events, scanner_factory=_scanner)
    sync = None
    if identity.job_id:
        from gpudoc.launch.jobsync import JobSync

        sync = JobSync(store.root, identity.job_id, run_id, record.host)
    launch_options = LaunchOptions(
        argv=list(resolved.argv), env=child_env, cwd=cwd, log_path=log_path,
        use_pty=_isatty(console.out), term_fd=_fileno(console.out), stdin_fd=_fileno(ws.stdin),
        term_grace_s=term_grace, on_start=on_start, on_tick=on_tick,
        scan=live,
    )
    launcher = Launcher(launch_options)
    console.flush()
    try:
        outcome = launcher.run()
    except LaunchError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: no record of it
        raise
    finally:
        if thread.is_alive():
            thread.stop()
        else:
            sampler.close()
        live.close()
    _merge_pids(record, state, [(p.pid, p.create_time) for p in outcome.processes])
    _finish_record(record, outcome, watch, sampler, log_path)
    if sync is not None and record.cause == "gpu_oom" and not sync.announced:
        # The live scan missed it (an output flood): the other nodes still learn of it now.
        diag = record.diagnosis or {}
        sync.announce("gpu_oom", rank=diag.get("rank"), line=str(diag.get("summary") or ""))
    store.save(record)
    result = RunResult(record=record, exit_code=outcome.status, log_path=str(log_path),
                       killed_by=outcome.signal, interrupted_by=outcome.interrupted_by)
    try:
        # gpudoc's own words go to stderr: stdout is the job's.
        show(result, Console(out=console.err, err=console.err, colour=console.colour), as_json=options.json)
    except OSError:
        pass  # the terminal is gone (hang-up): the record has it all
    return outcome.status, record


def node_rank(identity, argv: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """Which node of the job this is, for telling one job's records apart (they may share a host).

    Slurm's node id (or a group rank already in the environment) first; then torchrun's
    ``--node-rank``, but only with the static rendezvous: c10d hands out group ranks by arrival
    and ignores the flag; then ``NODE_RANK`` (PyTorch Lightning, accelerate)."""
    from gpudoc.launch.command import is_torchrun, launcher_args

    candidates = [identity.node_rank]
    head = launcher_args(argv)
    backend = None
    for i, arg in enumerate(head):
        for name in ("--rdzv-backend", "--rdzv_backend"):
            if arg == name and i + 1 < len(head):
                backend = head[i + 1]
            elif arg.startswith(name + "="):
                backend = arg.split("=", 1)[1]
    if is_torchrun(argv) and backend in (None, "static"):
        for i, arg in enumerate(head):
            for name in ("--node-rank", "--node_rank"):
                if arg == name and i + 1 < len(head):
                    candidates.append(head[i + 1])
                elif arg.startswith(name + "="):
                    candidates.append(arg.split("=", 1)[1])
    candidates.append(environ.get("NODE_RANK"))
    for value in candidates:
        try:
            return int(str(value).strip())
        except (TypeError, ValueError):
            continue
    return None


def _scanner():
    from gpudoc.diagnose.stream import SignatureScanner

    return SignatureScanner()


def _merge_pids(record, state: dict, procs) -> bool:
    changed = False
    seen = state["pids"]
    for pid, create_time in procs:
        if pid not in seen or (seen[pid] is None and create_time is not None):
            seen[pid] = create_time
            changed = True
    if changed:
        record.pids = [{"pid": pid, "create_time": ct} for pid, ct in sorted(seen.items())]
    return changed


def _finish_record(record, outcome, watch: _Watch, sampler, log_path: Path) -> None:
    record.ended_at = now_iso()
    record.duration_s = round(outcome.ended - outcome.started, 3)
    record.exit_code = outcome.status
    record.signal = outcome.signal if outcome.signal is not None else outcome.interrupted_by
    record.peak_memory_bytes = dict(sampler.peaks)
    record.gpus = [dict(g) for g in sampler.gpus]
    own_code = -outcome.signal if outcome.signal is not None else outcome.exit_code
    diagnosis = _diagnose(log_path, own_code, watch, [p["pid"] for p in record.pids])
    cause = diagnosis.get("cause") if diagnosis else None
    if outcome.interrupted_by is not None and outcome.status != 0 and cause in (None, "ok", "error", "signal"):
        cause = "signal"
        if diagnosis is not None:
            diagnosis = dict(diagnosis, cause="signal", summary=(
                f"Stopped by the user ({_signame(outcome.interrupted_by)} to gpudoc); "
                + str(diagnosis.get("summary") or "")).strip())
    if outcome.status == 0 and cause in (None, "error"):
        cause = "ok"
    record.cause = cause
    record.diagnosis = diagnosis
    if outcome.status == 0:
        record.status = "ok"
    elif outcome.interrupted_by is not None:
        record.status = "interrupted"
    else:
        record.status = "failed"
    record.ended_by = outcome.ended_by
    record.terminal_lost = outcome.terminal_lost
    record.log_error = outcome.log_error
    record.survivors = list(outcome.survivors)


def _diagnose(log_path: Path, exit_code: int | None, watch: _Watch, pids) -> dict | None:
    if exit_code == 0:
        # No failure by definition (SPEC: cause ok). An OOM the job caught and survived (an
        # automatic batch-size finder) is not a failure of the run either.
        return _ok_diagnosis()
    from gpudoc.diagnose import diagnose_text

    text = read_tail(log_path, TAIL_BYTES)
    missing = [line for line in watch.event_lines if line and line not in text]
    if missing:
        # The first failure scrolled out of the tail (a flood of output after it): keep its lines.
        text = "\n".join(missing) + "\n" + text
    return diagnose_text(text, exit_code=exit_code, own_pids=pids).to_dict()


def _ok_diagnosis() -> dict:
    keys = ("cause", "backend", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
            "reserved_unallocated_bytes", "other_processes", "gpu_index", "rank", "exit_code", "summary")
    doc: dict = dict.fromkeys(keys)
    doc.update(cause="ok", other_processes=[], exit_code=0, summary="No failure: the job exited 0.")
    return doc


def read_tail(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError:
        return ""
    if size > limit:
        newline = data.find(b"\n")
        if 0 <= newline < 4096:
            data = data[newline + 1:]  # start on a whole line
    return data.decode("utf-8", "replace")


def _profile_doc(profile) -> dict | None:
    try:
        doc = profile.to_dict()
    except AttributeError:
        return None
    return {"name": doc.get("name"), "path": doc.get("path"), "knobs": doc.get("knobs", {}),
            **{k: v for k, v in doc.items() if k not in ("name", "path", "knobs")}}


# -- the summary ------------------------------------------------------------------------------

def _signame(sig: int | None) -> str:
    from gpudoc.launch.signals import signal_name

    return signal_name(sig)


def _describe_rung(rung) -> str:
    if rung is None:
        return "next rung"
    name = getattr(rung, "rung", "rung")
    changes = getattr(rung, "changes", {}) or {}
    env = getattr(rung, "env", {}) or {}
    parts = [f"{k} {old} -> {new}" for k, (old, new) in changes.items()] + [f"{k}={v}" for k, v in env.items()]
    return f"{name}" + (f" ({', '.join(parts)})" if parts else "")


def _next_attempt(record: RunRecord, profile: Profile, options: RunOptions, ws: Workspace):
    from gpudoc.ladder.retry import next_attempt

    allow = options.allow_semantic or profile.allow_semantic
    return _refusing(lambda: next_attempt(record, profile, allow_semantic=allow, store=ws.store, cwd=ws.cwd,
                                          history=ws.history(profile, upto=record)))


def _user() -> str | None:
    try:
        import getpass

        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        return None


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(environ.get(name, default))
    except ValueError:
        return default


# -- tmux -------------------------------------------------------------------------------------

def start_in_tmux(options: RunOptions, ws: Workspace) -> int:
    import subprocess

    console, environ, cwd = ws.console, ws.environ, ws.cwd
    name = options.tmux
    if not name or any(c in name for c in ".:") or name.startswith("-"):
        raise LaunchError(f"--tmux: '{name}' is not a usable tmux session name (no '.', ':' or leading '-')")
    tmux = shutil.which("tmux", path=environ.get("PATH", os.defpath))
    if tmux is None:
        raise LaunchError("--tmux: tmux is not installed (apt-get install tmux, or brew install tmux)")
    env = {k: v for k, v in environ.items() if k not in ("TMUX", "TMUX_PANE")}
    probe = subprocess.run([tmux, "has-session", "-t", f"={name}"], env=env, capture_output=True, text=True)
    if probe.returncode == 0:
        raise LaunchError(f"--tmux: a tmux session named '{name}' already exists "
                          f"(attach: tmux attach -t {name}, or pick another name)")
    inner = [sys.executable, "-m", "gpudoc", *options.to_argv()]
    # A running tmux server gives new sessions its own environment, not ours: pass ours along
    # (only what differs, to stay far below tmux's command size limit).
    env_args = _tmux_env_args(tmux, env)
    cmd = [tmux, "new-session", "-d", "-s", name, "-c", str(cwd), *env_args, "--", *inner]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise LaunchError(f"--tmux: tmux could not start the session: {done.stderr.strip() or done.returncode}")
    console.error(f"gpudoc: started in tmux session '{name}'\n"
                  f"  attach:  tmux attach -t {name}\n"
                  f"  follow:  gpudoc logs -f   (from any pane, in {cwd})")
    return 0


def _tmux_env_args(tmux: str, env: Mapping[str, str]) -> list[str]:
    import subprocess

    shown = subprocess.run([tmux, "show-environment", "-g"], env=env, capture_output=True, text=True)
    if shown.returncode != 0:
        return []  # no server yet: the new server is started from our environment
    server: dict[str, str | None] = {}
    for line in shown.stdout.splitlines():
        if line.startswith("-"):
            server[line[1:]] = None
        elif "=" in line:
            key, _, value = line.partition("=")
            server[key] = value
    args = []
    for key, value in env.items():
        if key in ("TERM", "SHLVL", "_", "PWD", "OLDPWD"):
            continue
        if server.get(key) != value:
            args += ["-e", f"{key}={value}"]
    return args
