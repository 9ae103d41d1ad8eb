"""`gpudoc runs`: the run records of this directory (or $GPUDOC_HOME), oldest first."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from gpudoc.errors import UsageError
from gpudoc.render.show import show
from gpudoc.results.runs import AllRunsResult, PruneResult, RunsDiffResult, RunShowResult, RunsResult
from gpudoc.runs.record import RunRecord, changes, live_status
from gpudoc.runs.store import RunStore
from gpudoc.workspace import Workspace


def all_runs(ws: Workspace, *, as_json: bool = False, limit: int | None = None) -> int:
    """Every project's runs (the per-user index), one table per project."""
    from gpudoc.runs.index import projects

    stores = [RunStore(root.parent) for root in projects(ws.environ)]
    tables = tuple(_table(store, limit) for store in stores)
    status = show(AllRunsResult(tables=tables), ws.console, as_json=as_json)
    for store in stores:  # each project's skipped records, said as `gpudoc runs` says its own
        for note in store.take_notes():
            ws.console.error(note)
    return status


def runs(ws: Workspace, *, as_json: bool = False, limit: int | None = None) -> int:
    ws.store.require_readable()  # a runs directory that cannot be read is not "no runs yet"
    return show(_table(ws.store, limit), ws.console, as_json=as_json)


def _table(store: RunStore, limit: int | None) -> RunsResult:
    """One store's newest ``limit`` runs (all when None), each with its live status."""
    hostname = socket.gethostname()
    records = tuple(store.records(newest=limit or None))
    return RunsResult(runs_dir=str(store.root), records=records,
                      live_status=tuple(live_status(r, hostname=hostname) for r in records),
                      before=_compared_with(store, records))


def _compared_with(store: RunStore, records: tuple[RunRecord, ...]) -> dict[str, RunRecord]:
    """Per listed run, the run its CHANGED column compares with: the run it retried (``parent``:
    `--retry-oom`, `fix --rerun`), else the readable run before it. Read from the store when the
    listing leaves it out (`--last N`): a row says the same whatever else is listed."""
    ids = store.ids()
    position = {run_id: number for number, run_id in enumerate(ids)}
    listed = {record.id: record for record in records}
    found: dict[str, RunRecord] = {}
    for record in records:
        if record.parent:
            # Only a run of this store: a parent is a directory name, never a path to follow.
            base = (listed.get(record.parent) or store.record_or_none(record.parent)
                    if record.parent in position else None)
        else:
            earlier = (listed.get(run_id) or store.record_or_none(run_id)
                       for run_id in reversed(ids[:position.get(record.id, 0)]))
            base = next((candidate for candidate in earlier if candidate is not None), None)
        if base is not None:
            found[record.id] = base
    return found


def prune(ws: Workspace, *, keep: int | None = None, older_than_days: float | None = None, dry_run: bool = False,
          as_json: bool = False) -> int:
    """Remove the oldest runs beyond ``keep`` and/or older than ``older_than_days`` (never a live chain's)."""
    from gpudoc.runs.edits import unlisted_folder
    from gpudoc.runs.retention import plan_prune, plan_unlisted, remove, remove_unlisted

    if keep is None and older_than_days is None:
        raise UsageError("gpudoc runs prune: say what to keep: --keep N and/or --older-than DAYS")
    store = ws.store
    plan = plan_prune(store, keep=keep, older_than_days=older_than_days)
    removed = plan.remove if dry_run else remove(store, plan.remove)
    # The file states kept before edits no record lists go by the same rule (retention.py).
    unlisted = plan_unlisted(store, keep=keep, older_than_days=older_than_days)
    gone = unlisted.remove if dry_run else remove_unlisted(store, unlisted.remove)
    result = PruneResult(runs_dir=str(store.root), removed=tuple(removed), kept_live=tuple(plan.kept_live),
                         total=plan.total, dry_run=dry_run,
                         removed_unlisted=tuple(str(unlisted_folder(store.home) / name) for name in gone))
    return show(result, ws.console, as_json=as_json)


def diff(ws: Workspace, a: str, b: str, *, as_json: bool = False) -> int:
    """What changed from run ``a`` to run ``b``: knobs, environment, file edits, outcome."""
    first, second = ws.store.load(a), ws.store.load(b)
    result = RunsDiffResult(
        a=first.id, b=second.id,
        knobs=tuple(changes(first.knobs, second.knobs)),
        env=tuple(changes(first.env_set, second.env_set)),
        edits=tuple(changes(*_file_values(first, second))),
        outcome=tuple(changes(_outcome(first), _outcome(second))),
    )
    return show(result, ws.console, as_json=as_json)


def _file_values(first: RunRecord, second: RunRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """What each edited file key held when ``first`` ran and when ``second`` ran ("PATH KEY" ->
    value): ``first``'s own edits, then what was written for the next attempt (`fix --apply`) and
    ``second``'s own, so the diff shows every edit between the two, not only ``second``'s."""
    def edits(*lists: list) -> list[tuple[str, dict]]:
        return [(f"{edit.get('path')} {change.get('key')}", change) for edits in lists for edit in edits
                if isinstance(edit, dict) for change in edit.get("changes") or () if isinstance(change, dict)]

    ran: dict[str, Any] = {name: change.get("new") for name, change in edits(first.file_edits)}
    for name, change in edits(first.applied_edits, second.file_edits):
        ran.setdefault(name, change.get("old"))  # not edited for the first run: it held the old value
    then = dict(ran)
    for name, change in edits(first.applied_edits, second.file_edits):
        then[name] = change.get("new")
    return ran, then


def _outcome(record: RunRecord) -> dict[str, Any]:
    peak = record.peak_bytes
    steps = record.steps or {}  # the probe's: what a rung cost in time
    return {"status": live_status(record), "cause": record.cause, "exit_code": record.exit_code,
            "duration_s": round(record.duration_s, 1) if record.duration_s is not None else None, "peak_bytes": peak,
            "seconds_per_step": steps.get("seconds_per_step"), "samples_per_second": steps.get("samples_per_second"),
            "tokens_per_second": steps.get("tokens_per_second"), "peak_allocated_bytes": steps.get("peak_allocated_bytes")}


def show_run(ws: Workspace, run_id: str | None, *, as_json: bool = False, width: int = 60,
             plot: Path | None = None) -> int:
    """One run: its record (command, knobs, environment, edits, diagnosis, peaks) and its memory over time."""
    from gpudoc.runs.samples import read_timeline

    store = ws.store
    record = store.named_or_latest(run_id)
    line = read_timeline(store.samples_path(record.id), width=width)
    result = RunShowResult(record=record, live_status=live_status(record), start=line.start, end=line.end,
                           used=line.used, total=line.total, skipped=line.skipped)
    if plot is not None:
        from gpudoc.render.plot import plot_timeline

        fine = read_timeline(store.samples_path(record.id), width=PLOT_POINTS)
        plot_timeline(RunShowResult(record=record, live_status=result.live_status, start=fine.start, end=fine.end,
                                    used=fine.used, total=fine.total), plot)
        if not as_json:
            ws.console.error(f"gpudoc: wrote {plot}")
    return show(result, ws.console, as_json=as_json)


PLOT_POINTS = 600  # an image has room for ten times the terminal's marks
