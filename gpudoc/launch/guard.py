"""The job's guard: if gpudoc dies without ending the job, the guard ends it.

gpudoc cannot catch its own SIGKILL (nor the kernel OOM killer's), and the parent-death signal it
sets reaches only the job's first process: a job that ignores SIGTERM, or the children of a plain
``python train.py``, would live on, holding GPU memory nobody watches. So right after the launch
gpudoc forks a guard in a session of its own (Ctrl-C and a terminal hang-up never reach it) that
blocks reading a pipe whose only writer is gpudoc. When the launch ends normally gpudoc writes one
byte and the guard exits. When gpudoc dies, the kernel closes the pipe: the guard reads EOF with
no byte before it and ends every process of the job, SIGTERM then SIGKILL after the grace.

"Every process of the job" is what the guard can prove belongs to it, after gpudoc (the subreaper
the orphans were re-parented to) is gone: this uid's processes started since the launch that are
in the job's process group or session, or that carry this run's ``GPUDOC_RUN_ID`` in their
environment (torchrun's workers, in sessions of their own, inherit it), and every process gpudoc
saw in the job while it lived, which it names down the same pipe (``Guard.tell``): a sidecar
started in a new session with an environment of its own (``Popen(env={...},
start_new_session=True)``) carries neither mark. A process whose start time does not match what
was seen is never signalled (PID reuse). The guard costs the job nothing while gpudoc lives: it
sleeps in a read.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

from gpudoc.procs.identity import START_TIME_EARLY_S, ProcessRef, environ_value, live_pids, proc_stat, start_time

STAND_DOWN = b"."
# A job re-spawning workers while it is being ended: look again this many times.
_ROUNDS = 3


class Guard:
    """gpudoc's side of the guard: its PID (a child of gpudoc, not of the job) and the pipe."""

    def __init__(self, pid: int, write_fd: int) -> None:
        self.pid = pid
        self._write_fd: int | None = write_fd

    def tell(self, refs: Iterable[ProcessRef]) -> None:
        """Name processes gpudoc saw in the job (``PID START`` lines): should gpudoc die, the guard
        ends them too, whatever session, group or environment they moved to. Never blocks the
        launcher: a full pipe (a guard that stopped reading) drops the names, not the job."""
        data = b"".join(f"{ref.pid} {ref.create_time!r}\n".encode() for ref in refs if ref.create_time is not None)
        if self._write_fd is None or not data:
            return
        try:
            os.write(self._write_fd, data)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._write_fd = None  # the guard is gone (someone killed it): nobody left to tell

    def stand_down(self) -> None:
        """The launch has ended the job itself: tell the guard so, and reap it."""
        fd, self._write_fd = self._write_fd, None
        if fd is None:
            return
        try:
            os.write(fd, STAND_DOWN)
        except OSError:
            pass  # the guard is gone already (someone killed it): nothing to stand down
        finally:
            os.close(fd)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass  # reaped already by the launcher's wait for the job's orphans


def start_guard(pgid: int, *, run_marker: str | None, grace_s: float) -> Guard | None:
    """Fork the guard for the job whose process group (and session) is ``pgid``; None where fork fails.

    Call before any thread is started: the child runs only os-level calls and this module.
    """
    since = time.time() - START_TIME_EARLY_S  # a start time reads early by up to this (truncated boot time)
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the guard
        status = 0
        try:
            os.close(write_fd)
            _detach(read_fd)
            died, seen = _listen(read_fd)
            if died:
                _end_job(pgid, run_marker, since, grace_s, seen)
        except BaseException:  # the guard must never return into gpudoc's code (os._exit below)
            status = 1
        finally:
            os._exit(status)
    os.close(read_fd)
    os.set_blocking(write_fd, False)  # see Guard.tell
    return Guard(pid, write_fd)


def _detach(keep_fd: int) -> None:
    """Out of gpudoc's session and signals; no descriptor of gpudoc's (the job's pty, the log) kept."""
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    # stderr stays: the one line the guard says goes where gpudoc's own words went.
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, _max_fd())


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536


def _listen(read_fd: int) -> tuple[bool, list[ProcessRef]]:
    """Read gpudoc's lines until it stands down (False) or dies (True, with the processes it named)."""
    seen: dict[int, ProcessRef] = {}
    pending = b""
    while True:
        try:
            data = os.read(read_fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            return True, list(seen.values())
        if not data:
            return True, list(seen.values())
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            pid, _, created = line.partition(b" ")
            try:
                seen[int(pid)] = ProcessRef(int(pid), float(created))
            except ValueError:
                continue  # not a line gpudoc wrote
        if pending == STAND_DOWN:
            return False, []


def _end_job(pgid: int, run_marker: str | None, since: float, grace_s: float, seen: list[ProcessRef]) -> None:
    from gpudoc.procs.terminate import terminate

    ended = 0
    survivors: list[ProcessRef] = []
    for _ in range(_ROUNDS):
        members = job_members(pgid, run_marker, since)
        marked = {ref.pid for ref in members}
        members += [ref for ref in seen if ref.pid not in marked and _still_ours(ref)]
        if not members:
            break
        result = terminate(members, grace_s=grace_s)
        ended += len(result.terminated) + len(result.killed)
        survivors = result.survivors
    if ended:
        _say(f"gpudoc: gpudoc ended while its job ran: the guard ended the job's {ended} process(es)\n")
    if survivors:  # never claim a clean end that was not
        _say(f"gpudoc: {len(survivors)} process(es) of the job outlived even SIGKILL: "
             f"{', '.join(str(ref.pid) for ref in survivors)}\n")


def _still_ours(ref: ProcessRef) -> bool:
    """A process gpudoc named that is still the same one (PID reuse) and this user's."""
    try:
        if os.stat(f"/proc/{ref.pid}").st_uid != os.getuid():
            return False
    except OSError:
        return False
    return ref.is_running()


def _say(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:
        pass  # no terminal left: nothing to tell


def job_members(pgid: int, run_marker: str | None, since: float) -> list[ProcessRef]:
    """This uid's processes started since ``since`` in group/session ``pgid`` or marked with the run."""
    uid = os.getuid()
    me = os.getpid()
    members: list[ProcessRef] = []
    for pid in live_pids():
        if pid == me:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue  # gone meanwhile
        fields = proc_stat(pid)  # state, ppid, pgrp, session, ...
        if fields is None or len(fields) < 4 or fields[0] in ("Z", "X"):
            continue
        created = start_time(pid)
        if created is None or created < since:
            continue
        in_job = str(pgid) in (fields[2], fields[3])
        if in_job or (run_marker and environ_value(pid, "GPUDOC_RUN_ID") == run_marker):
            members.append(ProcessRef(pid, created))
    return members
