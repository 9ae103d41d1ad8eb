"""What ``/proc`` (via psutil) says about the PIDs that hold GPU memory.

The driver reports PIDs in the host's PID namespace; inside a container most of them do not exist
here, which is a fact worth reporting (``visible=False``), not an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gpudoc.facts.model import ProcessInfo, RunOwnerIndex


def process_facts(pids: Iterable[int], owners: RunOwnerIndex | None = None) -> tuple[ProcessInfo, ...]:
    """One ``ProcessInfo`` per distinct PID, in the order given. Never raises for a PID.

    ``owners`` knows the processes of earlier gpudoc runs: a process that belongs to one gets
    that run's id (and whether the run is still live).
    """
    import psutil  # imported where used, keeps `gpudoc --help` fast

    seen: dict[int, ProcessInfo] = {}
    for pid in pids:
        pid = int(pid)
        if pid not in seen:
            seen[pid] = _one(psutil, pid, owners)
    return tuple(seen.values())


def _one(psutil: Any, pid: int, owners: RunOwnerIndex | None) -> ProcessInfo:
    if pid <= 0:
        return ProcessInfo(pid=pid, visible=False)
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return ProcessInfo(pid=pid, visible=False)
    except psutil.AccessDenied:
        return ProcessInfo(pid=pid, visible=True)

    info: dict[str, Any] = {}
    vanished = False

    def get(key: str, fn: Callable[[], Any]) -> None:
        nonlocal vanished
        try:
            info[key] = fn()
        except psutil.ZombieProcess:
            pass  # a zombie keeps its PID, status and parent but not its command line
        except psutil.NoSuchProcess:
            vanished = True
        except (psutil.AccessDenied, KeyError, OSError):
            pass  # partial facts are still facts (hidepid, another user's process)

    with proc.oneshot():
        get("status", proc.status)
        get("ppid", proc.ppid)
        get("create_time", proc.create_time)
        get("uid", lambda: proc.uids().real)
        get("user", proc.username)
        get("name", proc.name)
        get("cmdline", lambda: tuple(proc.cmdline()))
    try:
        import os

        info["pgid"] = os.getpgid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    if vanished and "create_time" not in info:
        return ProcessInfo(pid=pid, visible=False)

    if info.get("user") is None and info.get("uid") is not None:
        info["user"] = str(info["uid"])  # a uid with no passwd entry (common in containers)
    status = info.get("status")
    zombie = status == psutil.STATUS_ZOMBIE
    ppid = info.get("ppid")
    orphaned = False
    if ppid is not None and pid != 1 and ppid != 0:
        # Re-parented to init, or the parent is gone: whoever launched it no longer owns it.
        orphaned = ppid == 1 or not psutil.pid_exists(ppid)
    owner = owners.owner(pid, info.get("create_time"), info.get("pgid")) if owners is not None else None
    pgid = info.get("pgid")
    return ProcessInfo(
        pid=pid,
        visible=True,
        user=info.get("user"),
        uid=info.get("uid"),
        name=info.get("name"),
        cmdline=info.get("cmdline", ()),
        ppid=ppid,
        pgid=info.get("pgid"),
        create_time=info.get("create_time"),
        status=status,
        zombie=zombie,
        orphaned=orphaned,
        group_leader_alive=psutil.pid_exists(pgid) if pgid is not None and pgid != pid else None,
        gpudoc_run_id=owner.run_id if owner is not None else None,
        gpudoc_run_live=owner.live if owner is not None else None,
    )
