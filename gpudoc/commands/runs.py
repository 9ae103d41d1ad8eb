"""`gpudoc runs`: the run records of this directory (or $GPUDOC_HOME), oldest first."""

from __future__ import annotations

import socket

from gpudoc.errors import UsageError
from gpudoc.render.show import show
from gpudoc.results import PruneResult, RunsResult
from gpudoc.runs.record import live_status
from gpudoc.workspace import Workspace


def runs(ws: Workspace, *, as_json: bool = False, limit: int | None = None) -> int:
    records = list(ws.store.records(newest=limit or None))
    hostname = socket.gethostname()
    result = RunsResult(runs_dir=str(ws.store.root), records=tuple(records),
                        live_status=tuple(live_status(r, hostname=hostname) for r in records))
    return show(result, ws.console, as_json=as_json)


def prune(ws: Workspace, *, keep: int | None = None, older_than_days: float | None = None, dry_run: bool = False,
          as_json: bool = False) -> int:
    """Remove the oldest runs beyond ``keep`` and/or older than ``older_than_days`` (never a live chain's)."""
    from gpudoc.runs.retention import plan_prune, remove

    if keep is None and older_than_days is None:
        raise UsageError("gpudoc runs prune: say what to keep: --keep N and/or --older-than DAYS")
    store = ws.store
    plan = plan_prune(store, keep=keep, older_than_days=older_than_days)
    removed = plan.remove if dry_run else remove(store, plan.remove)
    result = PruneResult(runs_dir=str(store.root), removed=tuple(removed), kept_live=tuple(plan.kept_live),
                         total=plan.total, dry_run=dry_run)
    return show(result, ws.console, as_json=as_json)
