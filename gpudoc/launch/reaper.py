"""Finding and ending every process of a job, including the ones that tried to get away.

torchrun starts each worker in its own session, so the job's process group does not contain them,
and when torchrun itself is SIGKILLed its workers are re-parented. gpudoc therefore becomes a
*child subreaper* before launching: orphans of the job are re-parented to gpudoc instead of init,
so "every descendant of gpudoc" is the job, whatever sessions or groups it made.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from gpudoc.procs.identity import ProcessRef, is_zombie_or_gone, live_pids, same_start, signal_if_same, start_time

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


_children_files: bool | None = None


def current_children() -> set[int]:
    """gpudoc's own children now (to tell them from the job's)."""
    kids = children_of(os.getpid())
    return set(kids if kids is not None else descendants_of(os.getpid()))


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
                  known: Iterable[ProcessRef] = ()) -> list[ProcessRef]:
    """Every live process of the job.

    The union of: our own descendants that are not in ``exclude`` (the job's first process and
    the orphans re-parented to us, the subreaper, with everything below them), members of the
    job's process group, and processes seen earlier (``known``) whose create time still matches
    (the PID was not reused). Zombies are not "live": reaping them is the caller's business.
    """
    me = os.getpid()
    excluded = set(exclude) | {me}
    found: dict[int, ProcessRef] = {}

    def add(pid: int) -> None:
        if pid in excluded or pid in found or is_zombie_or_gone(pid):
            return
        ct = start_time(pid)
        if ct is not None:
            found[pid] = ProcessRef(pid, ct)

    own = children_of(me)
    if own is None:
        own = list(descendants_of(me))
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
        ct = start_time(proc.pid)
        if ct is not None and not is_zombie_or_gone(proc.pid) and (
                proc.create_time is None or same_start(ct, proc.create_time)):
            found[proc.pid] = ProcessRef(proc.pid, ct)
    return sorted(found.values(), key=lambda p: p.pid)


def _group_members(pgid: int) -> list[int]:
    members: list[int] = []
    for pid in live_pids():
        try:
            if os.getpgid(pid) == pgid:
                members.append(pid)
        except OSError:
            continue  # gone meanwhile
    return members


def signal_processes(procs: Iterable[ProcessRef], sig: int) -> int:
    """Signal each process that is still the same one; returns how many were signalled."""
    return sum(1 for proc in procs if signal_if_same(proc, sig))
