"""One multi-node job's records: every node's ``gpudoc run`` writes its own, under a shared home;
which of them belong to one attempt of the job (engines reuse job ids)."""

from __future__ import annotations

import time

from gpudoc.runs.record import RunRecord, parse_iso
from gpudoc.runs.store import HISTORY_WINDOW, JOB_CLOCK_SLACK_S, RECORD, RunStore


def job_records(store: RunStore, job_id: str, *, attempt_of: RunRecord | None = None,
                slack_s: float = JOB_CLOCK_SLACK_S) -> list[RunRecord]:
    """Records of one multi-node job (every node's, under a shared home), oldest first.

    ``attempt_of``: only the attempt that record belongs to. Engines reuse ids (a fixed
    ``--rdzv-id``, a requeued Slurm job), and one attempt's nodes run at the same time, so a
    record belongs to it when its run overlaps that record's run (give or take the clocks of
    different nodes); a record that a later one names as its ``parent`` was retried, so it is
    an earlier attempt too.
    """
    found = [r for r in store.records(newest=HISTORY_WINDOW) if r.job_id == job_id]
    if attempt_of is None:
        return found
    start, end = _span(store, attempt_of)
    if start is None:
        return [r for r in found if r.id == attempt_of.id] or [attempt_of]
    same = []
    for record in found:
        r_start, r_end = _span(store, record)
        if record.id == attempt_of.id or (
            r_start is not None and r_start <= end + slack_s and r_end >= start - slack_s
        ):
            same.append(record)
    parents = {r.parent for r in same}
    same = [r for r in same if r.id not in parents or r.id == attempt_of.id]
    # Within the clock allowance an attempt that ended just before this one started still
    # overlaps. Two runs of the same node that did not run at the same time cannot both be
    # parts of one attempt: the earlier one is the older attempt.
    spans = {r.id: _span(store, r) for r in same}
    kept = []
    for record in same:
        r_start, r_end = spans[record.id]
        superseded = any(
            other.id != record.id and other.host == record.host and other.node_rank == record.node_rank
            and r_start is not None and (other_start := spans[other.id][0]) is not None
            and other_start >= r_end
            for other in same
        )
        if not superseded or record.id == attempt_of.id:
            kept.append(record)
    return kept

def _span(store: RunStore, record: RunRecord) -> tuple[float | None, float]:
    """When a run started and ended. Stamps have whole seconds: the end is rounded up. A run
    with no end (still going, or its launcher was killed) lasted until its log or record was
    last written, not until now: a dead launcher must not pull an old attempt into a new one."""
    start, end = parse_iso(record.started_at), parse_iso(record.ended_at)
    if end is None:
        times = []
        for path in (store.log_path(record.id), store.run_dir(record.id) / RECORD):
            try:
                times.append(path.stat().st_mtime)
            except OSError:
                continue
        end = max(times) if times else (start if start is not None else time.time())
    return start, end + 1.0
