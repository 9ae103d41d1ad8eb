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
environment (torchrun's workers, in sessions of their own, inherit it). A process whose start time
does not match what was seen is never signalled (PID reuse). The guard costs the job nothing while
gpudoc lives: it sleeps in one read.
"""

from __future__ import annotations

import os
import signal
import time

from gpudoc.procs.identity import ProcessRef, environ_value, live_pids, proc_stat, start_time

STAND_DOWN = b"."
# A job re-spawning workers while it is being ended: look again this many times.
_ROUNDS = 3


class Guard:
    """gpudoc's side of the guard: its PID (a child of gpudoc, not of the job) and the pipe."""

    def __init__(self, pid: int, write_fd: int) -> None:
        self.pid = pid
        self._write_fd: int | None = write_fd

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
    since = time.time() - 1.0  # start times are read in clock ticks: allow their rounding
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
            if _gpudoc_died(read_fd):
                _end_job(pgid, run_marker, since, grace_s)
        except BaseException:  # the guard must never return into gpudoc's code (os._exit below)
            status = 1
        finally:
            os._exit(status)
    os.close(read_fd)
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


def _gpudoc_died(read_fd: int) -> bool:
    while True:
        try:
            data = os.read(read_fd, 1)
        except InterruptedError:
            continue
        except OSError:
            return True
        return data != STAND_DOWN


def _end_job(pgid: int, run_marker: str | None, since: float, grace_s: float) -> None:
    from gpudoc.procs.terminate import terminate

    ended = 0
    for _ in range(_ROUNDS):
        members = job_members(pgid, run_marker, since)
        if not members:
            break
        result = terminate(members, grace_s=grace_s)
        ended += len(result.terminated) + len(result.killed)
    if ended:
        _say(f"gpudoc: gpudoc ended while its job ran: the guard ended the job's {ended} process(es)\n")


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
