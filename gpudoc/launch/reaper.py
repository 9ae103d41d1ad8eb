"""Finding and ending every process of a job, including the ones that tried to get away.

torchrun starts each worker in its own session, so the job's process group does not contain them,
and when torchrun itself is SIGKILLed its workers are re-parented. gpudoc therefore becomes a
*child subreaper* before launching: orphans of the job are re-parented to gpudoc instead of init,
so "every descendant of gpudoc" is the job, whatever sessions or groups it made.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from typing import Iterable

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1

_libc = None


def _prctl(option: int, arg: int) -> bool:
    global _libc
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        return _libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux, or a libc without prctl
        return False


def become_subreaper() -> bool:
    """Orphans of our descendants are re-parented to us (Linux >= 3.4); False where unsupported."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_parent_death_signal(sig: int) -> bool:
    """In a freshly forked child: receive ``sig`` when the parent (gpudoc) dies, even of SIGKILL."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


@dataclass(frozen=True)
class JobProcess:
    pid: int
    create_time: float | None

    def to_dict(self) -> dict:
        return {"pid": self.pid, "create_time": self.create_time}


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def job_processes(root_pid: int | None, pgid: int | None, *, exclude: Iterable[int] = (),
                  known: Iterable[JobProcess] = ()) -> list[JobProcess]:
    """Every live process of the job.

    The union of: descendants of the job's first process, members of its process group, our own
    children that are not in ``exclude`` (orphans re-parented to us, the subreaper), and processes
    seen earlier (``known``) whose create time still matches (the PID was not reused).
    """
    import psutil

    me = os.getpid()
    excluded = set(exclude) | {me}
    found: dict[int, JobProcess] = {}

    def add(proc: "psutil.Process") -> None:
        if proc.pid in excluded or proc.pid in found:
            return
        try:
            found[proc.pid] = JobProcess(proc.pid, proc.create_time())
        except (psutil.Error, OSError):
            pass

    try:
        own = psutil.Process(me).children(recursive=False)
    except (psutil.Error, OSError):
        own = []
    for child in own:
        if child.pid in excluded:
            continue
        add(child)
        try:
            for grandchild in child.children(recursive=True):
                add(grandchild)
        except (psutil.Error, OSError):
            pass
    if root_pid is not None and root_pid not in found:
        try:
            root = psutil.Process(root_pid)
            add(root)
            for proc in root.children(recursive=True):
                add(proc)
        except (psutil.Error, OSError):
            pass
    if pgid is not None:
        for pid in _group_members(pgid):
            if pid not in found and pid not in excluded:
                ct = _create_time(pid)
                if ct is not None:
                    found[pid] = JobProcess(pid, ct)
    for proc in known:
        if proc.pid in found or proc.pid in excluded:
            continue
        ct = _create_time(proc.pid)
        if ct is not None and (proc.create_time is None or abs(ct - proc.create_time) < 0.01):
            found[proc.pid] = JobProcess(proc.pid, ct)
    return sorted(found.values(), key=lambda p: p.pid)


def _group_members(pgid: int) -> list[int]:
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for name in entries:
        if not name.isdigit():
            continue
        try:
            if os.getpgid(int(name)) == pgid:
                members.append(int(name))
        except OSError:
            continue
    return members


def signal_group(pgid: int | None, sig: int) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass  # the group is gone (or was never made): nothing to signal


def signal_processes(procs: Iterable[JobProcess], sig: int) -> int:
    """Signal each process whose create time still matches; returns how many were signalled."""
    sent = 0
    for proc in procs:
        if proc.create_time is not None:
            ct = _create_time(proc.pid)
            if ct is None or abs(ct - proc.create_time) >= 0.01:
                continue  # gone, or the PID now belongs to someone else
        try:
            os.kill(proc.pid, sig)
            sent += 1
        except OSError:
            pass
    return sent


def reap_children() -> list[tuple[int, int]]:
    """Collect every exited child (zombies of the job re-parented to us included)."""
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            break
        if pid == 0:
            break
        reaped.append((pid, status))
    return reaped


def _alive(proc: JobProcess) -> bool:
    import psutil

    try:
        p = psutil.Process(proc.pid)
        if proc.create_time is not None and abs(p.create_time() - proc.create_time) >= 0.01:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False


def terminate(procs: list[JobProcess], pgid: int | None, *, grace_s: float,
              on_reaped=None) -> list[JobProcess]:
    """SIGTERM the group and every process, wait up to ``grace_s``, then SIGKILL what is left.

    Returns the processes still alive afterwards (normally none: only a process stuck in the
    kernel survives SIGKILL). ``on_reaped(pid, status)`` sees every child reaped meanwhile.
    """
    signal_group(pgid, signal.SIGTERM)
    signal_processes(procs, signal.SIGTERM)
    left = _wait_gone(procs, grace_s, on_reaped)
    if left:
        signal_group(pgid, signal.SIGKILL)
        signal_processes(left, signal.SIGKILL)
        left = _wait_gone(left, 5.0, on_reaped)
    return left


def _wait_gone(procs: list[JobProcess], timeout: float, on_reaped) -> list[JobProcess]:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        for pid, status in reap_children():
            if on_reaped is not None:
                on_reaped(pid, status)
        left = [p for p in procs if _alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
