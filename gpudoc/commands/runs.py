"""`gpudoc runs`: the run records of this directory (or $GPUDOC_HOME), oldest first."""

from __future__ import annotations

import os
import socket

from gpudoc.render.show import show
from gpudoc.results import RunsResult
from gpudoc.runs.record import RunRecord
from gpudoc.workspace import Workspace


def live_status(record: RunRecord, *, hostname: str | None = None) -> str:
    """The record's status, except that a "running" run whose gpudoc is gone is "lost"."""
    if record.status != "running" or record.launcher_pid is None:
        return record.status
    if record.host not in (hostname or socket.gethostname(), None):
        return "running"  # another node's run: cannot look at its processes from here
    try:
        os.kill(record.launcher_pid, 0)
    except ProcessLookupError:
        return "lost"
    except PermissionError:
        pass
    return "running"


def runs(ws: Workspace, *, as_json: bool = False, limit: int | None = None) -> int:
    records = list(ws.store.records())
    if limit:
        records = records[-limit:]
    hostname = socket.gethostname()
    result = RunsResult(runs_dir=str(ws.store.root), records=tuple(records),
                        live_status=tuple(live_status(r, hostname=hostname) for r in records))
    return show(result, ws.console, as_json=as_json)
