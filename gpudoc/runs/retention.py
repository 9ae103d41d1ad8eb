"""Which run records to remove: the oldest beyond a count or an age, never a live chain's.

``gpudoc runs prune`` asks for a plan and removes it; ``gpudoc run`` applies ``[runs] keep`` (by
default ``DEFAULT_KEEP``) after each run, so a home never grows without bound. A run is kept,
whatever its age, while it is running (its gpudoc is alive) and so is every run of its retry
chain (its parents): ``fix`` and ``--retry-oom`` read them. Only records this user wrote are
ever removed, and a run directory is removed as a directory, never through a link. The bytes
gpudoc kept before an edit (``originals/``) go with the last record that lists the edit.

After a run, at most ``PRUNE_PER_RUN`` records go (the oldest), and the run says so: a home that
grew to ten thousand records costs the next run a second, not minutes after its job ended; the
rest go after the next runs. `gpudoc runs prune` removes all it is asked to.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass, field

from gpudoc.runs.record import RUNNING, RunRecord, live_status, parse_iso
from gpudoc.runs.store import HISTORY_WINDOW, RunStore

DEFAULT_KEEP = 1000
PRUNE_PER_RUN = 100


@dataclass
class PrunePlan:
    remove: list[str] = field(default_factory=list)  # run ids, oldest first
    kept_live: list[str] = field(default_factory=list)  # old enough to go, but of a live chain
    total: int = 0
    later: int = 0  # beyond ``at_most``: left for a later prune


def plan_prune(store: RunStore, *, keep: int | None = None, older_than_days: float | None = None,
               now: float | None = None, at_most: int | None = None) -> PrunePlan:
    """The runs beyond the newest ``keep`` and/or started more than ``older_than_days`` ago; only
    the oldest ``at_most`` of them when given (the rest are counted in ``later``)."""
    ids = store.ids()
    plan = PrunePlan(total=len(ids))
    candidates = ids[:-keep] if keep is not None and keep < len(ids) else ([] if keep is not None else list(ids))
    if older_than_days is not None:
        cutoff = (time.time() if now is None else now) - older_than_days * 86400
        pool = candidates if keep is not None else ids
        candidates = [run_id for run_id in pool if _started(store, run_id, default=cutoff + 1) < cutoff]
    if at_most is not None and len(candidates) > at_most:
        plan.later = len(candidates) - at_most
        candidates = candidates[:at_most]
    if not candidates:
        return plan
    chains = _live_chains(store)
    for run_id in candidates:
        record = store.record_or_none(run_id)
        if record is None:
            if run_id in store.foreign:
                continue  # another user's: never ours to remove
            plan.remove.append(run_id)  # unreadable, or a directory left half-made
        elif run_id in chains or live_status(record) == RUNNING:
            plan.kept_live.append(run_id)
        else:
            plan.remove.append(run_id)
    return plan


def _started(store: RunStore, run_id: str, *, default: float) -> float:
    record = store.record_or_none(run_id)
    stamp = parse_iso(record.started_at) if record is not None else None
    return stamp if stamp is not None else default


def _live_chains(store: RunStore) -> set[str]:
    """Every run of a chain whose newest run is still running (the newest runs are read)."""
    records = {r.id: r for r in store.records(newest=HISTORY_WINDOW)}
    protected: set[str] = set()
    for record in records.values():
        if live_status(record) != RUNNING:
            continue
        current: RunRecord | None = record
        while current is not None and current.id not in protected:
            protected.add(current.id)
            parent = current.parent
            current = (records.get(parent) or store.record_or_none(parent)) if parent else None
    return protected


def prune_after_run(store: RunStore, keep: int) -> str | None:
    """``[runs] keep`` after a run: the oldest ``PRUNE_PER_RUN`` records beyond it go; the line
    that says what went (None when nothing did)."""
    if len(store.ids()) <= keep:
        return None  # the usual case: one directory listing
    plan = plan_prune(store, keep=keep, at_most=PRUNE_PER_RUN)
    removed = remove(store, plan.remove)
    if not removed:
        return None
    what = "the oldest run record" if len(removed) == 1 else f"the {len(removed)} oldest run records"
    later = f" ({plan.later} more go after the next runs)" if plan.later else ""
    return f"gpudoc: removed {what} beyond [runs] keep = {keep}{later}"


def remove(store: RunStore, run_ids: list[str]) -> list[str]:
    """Remove these runs' directories (this user's, real directories only), and the originals
    only they listed; the ids removed."""
    removed = []
    uid = os.getuid()
    listed: set[str] = set()
    for run_id in run_ids:
        folder = store.run_dir(run_id)
        try:
            info = folder.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue  # a link planted as a run, or another user's: left alone
        record = store.record_or_none(run_id)
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(run_id)
            listed.update(_originals_of(record))
    if listed:
        _drop_originals(store, listed)
    return removed


def _originals_of(record: RunRecord | None) -> set[str]:
    from gpudoc.runs.edits import record_edits

    return {edit.old_sha256 for edit in record_edits(record) if edit.old_sha256} if record is not None else set()


def _drop_originals(store: RunStore, digests: set[str]) -> None:
    """The originals in ``digests`` that no record still kept lists: nothing can restore to them."""
    from gpudoc.runs.edits import ORIGINALS

    for record in store.records():
        digests -= _originals_of(record)
        if not digests:
            return
    for digest in digests:
        try:
            os.unlink(store.home / ORIGINALS / digest)
        except OSError:
            pass  # gone already, or never kept (the .gpudoc.bak held it)
