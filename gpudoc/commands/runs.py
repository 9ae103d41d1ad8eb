"""`gpudoc runs`: the run records of this directory (or $GPUDOC_HOME), oldest first."""

from __future__ import annotations

import json
import os
import shlex
import socket

from gpudoc.runs.record import RunRecord
from gpudoc.units import format_duration
from gpudoc.workspace import Workspace

_COLUMNS = ("id", "started", "duration", "status", "cause", "command")


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


def _started(text: str | None) -> str:
    # "2026-01-31T14:05:09+0100" -> "2026-01-31 14:05:09"
    return (text or "-")[:19].replace("T", " ")


def runs(ws: Workspace, *, as_json: bool = False, limit: int | None = None) -> int:
    console, store = ws.console, ws.store
    records = list(store.records())
    if limit:
        records = records[-limit:]
    hostname = socket.gethostname()
    if as_json:
        from gpudoc.render.json_doc import envelope

        docs = []
        for r in records:
            doc = r.to_dict()
            doc["status"] = live_status(r, hostname=hostname)
            docs.append(doc)
        console.print(json.dumps(envelope("runs", status="ok", exit_code=0, runs_dir=str(store.root),
                                          runs=docs), indent=2))
        return 0
    if not records:
        console.print(f"No runs yet in {store.root} (start one with `gpudoc run -- COMMAND`).")
        return 0
    rows = []
    for r in records:
        status = live_status(r, hostname=hostname)
        command = shlex.join(r.command)
        rows.append((r.id, _started(r.started_at), format_duration(r.duration_s), status, r.cause or "-",
                     command if len(command) <= 60 else command[:59] + "…"))
    widths = [max(len(_COLUMNS[i]), *(len(row[i]) for row in rows)) for i in range(len(_COLUMNS) - 1)]
    header = "  ".join(c.upper().ljust(w) for c, w in zip(_COLUMNS, widths)) + "  COMMAND"
    console.print(console.style(header, "bold"))
    colours = {"ok": "green", "failed": "red", "interrupted": "yellow", "lost": "red", "running": "cyan"}
    for row in rows:
        cells = [cell.ljust(w) for cell, w in zip(row, widths)]
        cells[3] = console.style(cells[3], colours.get(row[3], "dim"))
        console.print("  ".join(cells) + "  " + row[-1])
    return 0
