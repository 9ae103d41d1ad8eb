"""What ``/proc`` (via psutil) says about the PIDs that hold GPU memory.

The driver reports PIDs in the host's PID namespace; inside a container most of them do not exist
here, which is a fact worth reporting (``visible=False``), not an error.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from gpudoc.facts.model import ProcessInfo

# A PID matched against a run record by (pid, create_time) may differ by clock rounding.
_CREATE_TIME_SLACK_S = 1.0


def process_facts(pids: Iterable[int], runs: Any | None = None) -> tuple[ProcessInfo, ...]:
    """One ``ProcessInfo`` per distinct PID, in the order given. Never raises for a PID.

    ``runs`` is a ``RunStore``: when given, a process whose group or (pid, create time) belongs to
    an earlier ``gpudoc run`` gets that run's id.
    """
    import psutil  # noqa: PLC0415 - imported where used, keeps `gpudoc --help` fast

    records = _run_records(runs)
    seen: dict[int, ProcessInfo] = {}
    for pid in pids:
        pid = int(pid)
        if pid not in seen:
            seen[pid] = _one(psutil, pid, records)
    return tuple(seen.values())


def _run_records(runs: Any | None) -> list:
    if runs is None:
        return []
    try:
        return list(runs.records())
    except Exception:
        return []  # an unreadable runs directory must not hide the process facts


def _one(psutil: Any, pid: int, records: list) -> ProcessInfo:
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

    def get(key: str, fn) -> None:
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
        import os  # noqa: PLC0415

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
        gpudoc_run_id=_run_id(pid, info.get("pgid"), info.get("create_time"), records),
    )


def _started(record: Any) -> float | None:
    text = getattr(record, "started_at", None)
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        try:
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return None


def _run_id(pid: int, pgid: int | None, create_time: float | None, records: list) -> str | None:
    for record in reversed(records):  # newest first: PIDs get reused, recent runs are likelier
        for entry in getattr(record, "pids", None) or ():
            try:
                if int(entry.get("pid")) != pid:
                    continue
                recorded = entry.get("create_time")
            except (AttributeError, TypeError, ValueError):
                continue
            if recorded is None or create_time is None or abs(float(recorded) - create_time) <= _CREATE_TIME_SLACK_S:
                return record.id
        group = getattr(record, "process_group", None)
        if group is not None and pgid is not None and pgid == group:
            started = _started(record)
            # A group id can be reused too: the process must not predate the run.
            if started is None or create_time is None or create_time >= started - _CREATE_TIME_SLACK_S:
                return record.id
    return None
