"""One launched attempt of `gpudoc run`: start the job, watch its output and GPUs, write its record.

Wires ``gpudoc.launch`` (spawn, tee, scan, sampler, fail-fast across nodes) to the run store and the
diagnosis, and hands the finished record to ``gpudoc.render`` for the summary."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from gpudoc.commands.run_options import RunOptions
from gpudoc.diagnose.diagnosis import MEMORY_CAUSES, Diagnosis
from gpudoc.errors import GpudocError, LaunchError
from gpudoc.output import Console
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.runs.store import PRIVATE_FILE_MODE, SHARED_FILE_MODE, StoreError
from gpudoc.runs.tail import read_tail
from gpudoc.workspace import Workspace

if TYPE_CHECKING:
    from gpudoc.diagnose.stream import SignatureScanner
    from gpudoc.launch.command import ResolvedCommand
    from gpudoc.launch.spawn import Outcome
    from gpudoc.launch.watch import GpuSampler
    from gpudoc.profiles.model import Profile


T = TypeVar("T")

# The diagnosis reads the end of the log: a failure is near the end, and a 12-hour log can be huge.
DEFAULT_OOM_GRACE_S = 5.0
DEFAULT_SAMPLE_INTERVAL_S = 1.0
DEFAULT_TERM_GRACE_S = 10.0
_KEEP_EVENT_LINES = 20


# -- the launch itself ------------------------------------------------------------------------

def refusing(func: Callable[[], T]) -> T:
    """Anything that stops `run` before launch exits 125, so it cannot be mistaken for the job's."""
    try:
        return func()
    except LaunchError:
        raise
    except GpudocError as exc:
        raise LaunchError(str(exc).removeprefix("gpudoc: "), file=exc.file, key=exc.key) from None


@dataclass
class _Watch:
    """What the output stream told us while the job ran (bounded)."""

    multi_process: bool
    oom_grace_s: float
    first_oom: Any = None
    event_lines: list[str] = field(default_factory=list)
    ranks: set = field(default_factory=set)


def launch_attempt(options: RunOptions, profile: Profile, resolved: ResolvedCommand, child_env: dict[str, str],
            edits: list[dict], ws: Workspace, *, parent: str | None) -> tuple[int, RunRecord]:
    from gpudoc.commands.resume import record_written
    from gpudoc.job import is_multi_process, job_identity, parse_command
    from gpudoc.launch.options import safe_warn
    from gpudoc.launch.rank_files import with_hidden_rank_logs
    from gpudoc.launch.scan import LiveScan
    from gpudoc.launch.spawn import Launcher, LaunchOptions
    from gpudoc.launch.watch import GpuSampler, SamplerThread, nvml_reader
    from gpudoc.runs import probe, steps
    from gpudoc.runs.store import new_run_id

    console, cwd, store, nvml_backend = ws.console, ws.cwd, ws.store, ws.nvml_backend
    run_id = new_run_id()
    job = parse_command(launched := with_hidden_rank_logs(resolved.argv, store.run_dir(run_id) / "ranks"))
    identity = job_identity(job, child_env)
    record = RunRecord(
        id=run_id, command=list(options.command), cwd=str(cwd), profile=_profile_doc(profile),
        env_set=dict(resolved.env_set), file_edits=edits, started_at=now_iso(), parent=parent,
        job_id=identity.job_id, node_rank=identity.node_rank,
        launcher_pid=os.getpid(), user=_user(), trial_of=options.trial_of,
    )
    record.argv = list(resolved.argv)
    record.resumed_from = dict(options.resume) if options.resume is not None else None
    record.run_switches = options.switches()
    child_env = dict(child_env, GPUDOC_RUN_ID=run_id)
    run_dir = store.run_dir(run_id)
    probing = not options.no_probe and profile.run.get("probe", True) is not False
    if probing:  # the job's environment alone, never gpudoc's own
        child_env = probe.launch_environment(child_env, run_dir, resolved.argv, say=safe_warn if not options.attempt else None,
                                             snapshot=probe.snapshot_setting(profile.run, store, parent), cwd=cwd)
    log_path = store.log_path(run_id)

    watch = _Watch(multi_process=is_multi_process(job, profile),
                   oom_grace_s=_seconds(profile.run.get("oom_grace_s"), DEFAULT_OOM_GRACE_S, low=-1, high=3600,
                                        name="[run] oom_grace_s", console=console))
    shared = bool(profile.run.get("shared", False))
    file_mode = SHARED_FILE_MODE if shared else PRIVATE_FILE_MODE
    # An unwritable or full runs directory refuses the launch, before it; once the job runs, a
    # record that cannot be saved is said once and never stops the job.
    refusing(lambda: store.create(record, shared=shared))
    from gpudoc.runs.index import register

    register(store.root, ws.environ)  # for `gpudoc runs --all`
    said_unsaved = False

    def keep(rec: RunRecord) -> None:
        nonlocal said_unsaved
        try:
            store.save(rec)
        except StoreError as exc:
            if not said_unsaved:
                safe_warn(f"{str(exc).removeprefix('gpudoc: ')}; the job goes on, this run's record is out of date")
            said_unsaved = True
    sampler = GpuSampler(store.samples_path(run_id), reader_factory=lambda: nvml_reader(nvml_backend),
                         environ=child_env, mode=file_mode, warn=safe_warn)
    thread = SamplerThread(sampler, _seconds(profile.run.get("sample_interval_s"), DEFAULT_SAMPLE_INTERVAL_S, low=0.05,
                                             high=3600, name="[run] sample_interval_s", console=console))
    state: dict[str, dict[int, float | None]] = {"pids": {}}

    def on_start(pid: int, pgid: int) -> None:
        # The record appears with the job's PID and group in it: a `gpudoc clean` after a crash
        # of gpudoc itself can still tell the job's processes.
        record.process_group = pgid
        from gpudoc.procs.identity import start_time

        _merge_pids(record, state, [(pid, start_time(pid))])
        keep(record)
        sampler.job_pids = lambda: list(state["pids"])
        thread.start()
        if options.watch:
            from gpudoc.commands.watch import watch_in_split

            watch_in_split(run_id, ws)

    launcher: Launcher | None = None

    def on_events(events: Iterable[Any]) -> None:
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
        if _merge_pids(record, state, [(p.pid, p.create_time) for p in procs]) | _note_ranks(record, procs):
            keep(record)
        if sync is not None and not launch.end_requested and not sync.announced:
            elsewhere = sync.failures_elsewhere()
            if elsewhere:
                first = elsewhere[0]
                where = f"{first.get('host')}" + (f" rank {first['rank']}" if first.get("rank") is not None else "")
                launch.warn(f"job {identity.job_id}: GPU out of memory on {where} (run {first.get('run_id')}): "
                            f"ending this node's part in {max(watch.oom_grace_s, 0):g} s")
                launch.request_end(f"gpu_oom elsewhere ({first.get('host')}, run {first.get('run_id')})",
                                   max(watch.oom_grace_s, 0))

    # How long a job gets between SIGTERM and SIGKILL when gpudoc is told to stop (tests shorten it).
    term_grace = _seconds(child_env.get("GPUDOC_TERM_GRACE_S"), DEFAULT_TERM_GRACE_S, low=0, high=3600,
                          name="GPUDOC_TERM_GRACE_S", console=console)
    live = LiveScan(log_path, on_events, scanner_factory=_scanner)
    sync = None
    if identity.job_id:
        from gpudoc.launch.jobsync import JobSync

        sync = JobSync(store.root, identity.job_id, run_id, record.host)
    launch_options = LaunchOptions(
        argv=launched, env=child_env, cwd=cwd, log_path=log_path, log_mode=file_mode,
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
    _read_rank_logs(record, job, cwd, outcome.started)
    from gpudoc.diagnose.own_flags import refused_own_flags, user_command
    record.diagnosis = refused_own_flags(record.diagnosis, user_command(record, store), launched)
    record_written(record, profile, cwd)  # what a relaunch of this chain may resume from
    record.take_observations(probe.observations(run_dir, record, safe_warn) if probing else {})
    record.steps = steps.step_figures(record.steps, log_path)  # the probe's, else the job's progress lines
    if sync is not None and record.cause == "gpu_oom" and not sync.announced:
        # The live scan missed it (an output flood): the other nodes still learn of it now.
        diag = record.diagnosis
        sync.announce("gpu_oom", rank=diag.rank if diag else None, line=diag.summary if diag else "")
    keep(record)
    # The result layer is imported once the job has ended: the launch path stays short.
    from gpudoc.render.show import show
    from gpudoc.results.runs import RunResult

    result = RunResult(record=record, exit_code=outcome.status, log_path=str(log_path),
                       killed_by=outcome.signal, interrupted_by=outcome.interrupted_by,
                       retries_left=options.retry_oom - options.attempt)
    try:
        # gpudoc's own words go to stderr: stdout is the job's.
        show(result, Console(out=console.err, err=console.err, colour=console.colour), as_json=options.json)
    except OSError:
        pass  # the terminal is gone (hang-up): the record has it all
    return outcome.status, record


def _scanner() -> SignatureScanner:
    from gpudoc.diagnose.stream import SignatureScanner as Scanner

    return Scanner()


def _merge_pids(record: RunRecord, state: dict[str, dict[int, float | None]],
                procs: Iterable[tuple[int, float | None]]) -> bool:
    changed = False
    seen = state["pids"]
    for pid, create_time in procs:
        if pid not in seen or (seen[pid] is None and create_time is not None):
            seen[pid] = create_time
            changed = True
    if changed:
        record.pids = [{"pid": pid, "create_time": ct} for pid, ct in sorted(seen.items())]
    return changed


def _read_rank_logs(record: RunRecord, job: Any, cwd: Path, started: float) -> None:
    """torchrun's per-rank files (``--log-dir``): listed in the record (`gpudoc logs --rank`), and
    read when the combined output does not explain a failure: a rank hidden from the console by
    ``--local-ranks-filter`` or ``--redirects`` failed there."""
    from gpudoc.job.rank_logs import rank_log_dir, rank_logs

    log_dir = rank_log_dir(job, cwd)
    files = rank_logs(log_dir, since=started) if log_dir is not None else {}
    record.rank_logs = {str(rank): [str(path) for path in paths] for rank, paths in files.items()}
    diagnosis = record.diagnosis
    if not files or record.status == "ok" or (diagnosis is not None and diagnosis.cause in MEMORY_CAUSES
                                                and not diagnosis.inferred):
        return
    from gpudoc.diagnose.text import diagnose_text, which_failed_first

    # Each rank's file in its own words ("Rank 1 ran out ..."), then the first real failure among them.
    ranks = list(files)
    owns = [diagnose_text("".join(read_tail(path) for path in files[rank]), rank_hint=rank) for rank in ranks]
    chosen = which_failed_first(owns)
    own, rank = owns[chosen], ranks[chosen]
    if own.cause in (None, "ok") or (diagnosis is not None and diagnosis.cause not in ("ok", "error", "signal")
                                     and own.cause not in MEMORY_CAUSES):
        return
    where = os.path.dirname(files[rank][0])
    record.diagnosis = replace(own, exit_code=diagnosis.exit_code if diagnosis else None,
                               summary=f"{own.summary.rstrip('.')} (torchrun's log of that rank: {where}).")
    record.cause = own.cause



def _note_ranks(record: RunRecord, procs: Iterable[Any]) -> bool:
    """The RANK each new worker's environment gives it (torchrun, accelerate, deepspeed set it): a
    failure printed without a rank prefix is still attributed. True when a rank was added."""
    from gpudoc.procs.identity import environ_value

    added = False
    for proc in procs:
        key = str(proc.pid)
        if key in record.worker_ranks or len(record.worker_ranks) >= _MAX_WORKERS:
            continue
        value = environ_value(proc.pid, "RANK")
        if value is not None and value.isdigit():
            record.worker_ranks[key] = int(value)
            added = True
    return added


_MAX_WORKERS = 4096


def _finish_record(record: RunRecord, outcome: Outcome, watch: _Watch, sampler: GpuSampler, log_path: Path) -> None:
    record.ended_at = now_iso()
    record.duration_s = round(outcome.ended - outcome.started, 3)
    record.exit_code = outcome.status
    record.signal = outcome.signal if outcome.signal is not None else outcome.interrupted_by
    record.peak_memory_bytes = dict(sampler.peaks)
    record.gpus = [dict(g) for g in sampler.gpus]
    record.samples_error = sampler.error
    own_code = -outcome.signal if outcome.signal is not None else outcome.exit_code
    # One worker on this node: whatever failed without naming its rank failed on that one.
    diagnosis = _diagnose(log_path, own_code, watch, record.job_pids, rank_hint=record.only_worker_rank)
    cause = diagnosis.cause
    if outcome.interrupted_by is not None and outcome.status != 0 and (
            cause in (None, "ok", "error", "signal") or diagnosis.inferred):
        diagnosis = diagnosis.stopped_by_user(_signame(outcome.interrupted_by))
        cause = diagnosis.cause
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


def _diagnose(log_path: Path, exit_code: int | None, watch: _Watch, pids: list[int], *,
              rank_hint: int | None = None) -> Diagnosis:
    if exit_code == 0:
        # No failure by definition (SPEC: cause ok). An OOM the job caught and survived (an
        # automatic batch-size finder) is not a failure of the run either.
        return Diagnosis.ok()
    from gpudoc.diagnose.text import diagnose_text

    text = read_tail(log_path)
    missing = [line for line in watch.event_lines if line and line not in text]
    if missing:
        # The first failure scrolled out of the tail (a flood of output after it): keep its lines.
        text = "\n".join(missing) + "\n" + text
    return diagnose_text(text, exit_code=exit_code, own_pids=pids, rank_hint=rank_hint)


def _profile_doc(profile: Profile) -> dict | None:
    try:
        doc = profile.to_dict()
    except AttributeError:
        return None
    return {"name": doc.get("name"), "path": doc.get("path"), "knobs": doc.get("knobs", {}),
            **{k: v for k, v in doc.items() if k not in ("name", "path", "knobs")}}



def _signame(sig: int | None) -> str:
    from gpudoc.launch.signals import signal_name

    return signal_name(sig)



def _user() -> str | None:
    try:
        import getpass

        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        return None


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fileno(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def _seconds(value: object, default: float, *, low: float, high: float, name: str, console: Console) -> float:
    """A duration setting, or its default (said once, on stderr) when it is not a finite number of
    seconds in [low, high]: ``nan`` or a negative grace must never switch off SIGKILL."""
    if value is None:
        return default
    try:
        seconds = float(str(value))
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and low <= seconds <= high:
        return seconds
    console.error(f"gpudoc: note: {name} = {value!r} is not a number of seconds in [{low:g}, {high:g}]: "
                  f"using {default:g}")
    return default
