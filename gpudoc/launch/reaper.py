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


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_boot_time: float | None = None


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on; the name may hold spaces and parens."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    end = data.rfind(b")")
    return data[end + 2:].decode("ascii", "replace").split() if end > 0 else None


def _boot() -> float | None:
    global _boot_time
    if _boot_time is None:
        try:
            with open("/proc/stat", "rb") as handle:
                for line in handle:
                    if line.startswith(b"btime"):
                        _boot_time = float(line.split()[1])
                        break
        except OSError:
            return None
    return _boot_time


def proc_create_time(pid: int) -> float | None:
    """A process's start time in seconds since the epoch, computed exactly as psutil does (the
    values must compare equal with ``psutil.Process(pid).create_time()`` elsewhere in gpudoc)."""
    fields = _proc_stat(pid)
    if fields is None:
        return None if os.path.isdir("/proc/self") else _psutil_create_time(pid)
    boot = _boot()
    if boot is None or len(fields) < 20:
        return _psutil_create_time(pid)
    return float(fields[19]) / _CLK_TCK + boot


def _psutil_create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


_create_time = proc_create_time


def _is_zombie_or_gone(pid: int) -> bool:
    fields = _proc_stat(pid)
    return fields is None or fields[0] in ("Z", "X")


_children_files: bool | None = None


def children_of(pid: int) -> list[int] | None:
    """Direct children from /proc/PID/task/*/children (cheap); None where the kernel lacks it."""
    global _children_files
    if _children_files is None:
        me = os.getpid()
        _children_files = os.path.exists(f"/proc/{me}/task/{me}/children")
    if not _children_files:
        return None
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                kids.extend(int(x) for x in handle.read().split())
        except OSError:
            continue  # the thread (or the process) ended meanwhile
    return kids


def descendants_of(pid: int) -> list[int]:
    kids = children_of(pid)
    if kids is None:
        import psutil

        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except (psutil.Error, OSError):
            return []
    out: list[int] = []
    stack = list(kids)
    seen = set()
    while stack:
        child = stack.pop()
        if child in seen:
            continue
        seen.add(child)
        out.append(child)
        stack.extend(children_of(child) or ())
    return out


def job_processes(root_pid: int | None, pgid: int | None, *, exclude: Iterable[int] = (),
                  known: Iterable[JobProcess] = ()) -> list[JobProcess]:
    """Every live process of the job.

    The union of: our own descendants that are not in ``exclude`` (the job's first process and
    the orphans re-parented to us, the subreaper, with everything below them), members of the
    job's process group, and processes seen earlier (``known``) whose create time still matches
    (the PID was not reused). Zombies are not "live": reaping them is the caller's business.
    """
    me = os.getpid()
    excluded = set(exclude) | {me}
    found: dict[int, JobProcess] = {}

    def add(pid: int) -> None:
        if pid in excluded or pid in found or _is_zombie_or_gone(pid):
            return
        ct = proc_create_time(pid)
        if ct is not None:
            found[pid] = JobProcess(pid, ct)

    own = children_of(me)
    if own is None:
        own = [pid for pid in descendants_of(me)]
    for child in own:
        if child in excluded:
            continue
        add(child)
        for pid in descendants_of(child):
            add(pid)
    if root_pid is not None and root_pid not in found and root_pid not in excluded:
        add(root_pid)
        for pid in descendants_of(root_pid):
            add(pid)
    if pgid is not None:
        for pid in _group_members(pgid):
            add(pid)
    for proc in known:
        if proc.pid in found or proc.pid in excluded:
            continue
        ct = proc_create_time(proc.pid)
        if ct is not None and not _is_zombie_or_gone(proc.pid) and (
                proc.create_time is None or abs(ct - proc.create_time) < 0.01):
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
    if _is_zombie_or_gone(proc.pid):
        return False
    if proc.create_time is not None:
        ct = proc_create_time(proc.pid)
        return ct is not None and abs(ct - proc.create_time) < 0.01
    return True


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
