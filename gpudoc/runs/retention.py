"""Which run records to remove: the oldest beyond a count or an age, never a live chain's.

``gpudoc runs prune`` asks for a plan and removes it; ``gpudoc run`` applies ``[runs] keep`` (by
default ``DEFAULT_KEEP``) after each run, so a home never grows without bound. A run is kept,
whatever its age, while it is running (its gpudoc is alive) and so is every run of its retry
chain (its parents): ``fix`` and ``--retry-oom`` read them. Only records this user wrote are
ever removed, and a run directory is removed as a directory, never through a link. The bytes
gpudoc kept before an edit (``originals/``) go with the last record that lists the edit; those
kept for an edit no record lists (``originals/unlisted/``: `fix --log --apply`, `profile new
--force`) go by the records' rule, each counted as a record started when it was kept.

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

from gpudoc.runs.edits import unlisted_folder
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
    """``[runs] keep`` after a run: the oldest ``PRUNE_PER_RUN`` records beyond it go, and as many
    unlisted originals (``prune_unlisted``); the lines that say what went (None when nothing did)."""
    unlisted = prune_unlisted(store, keep)
    said = [line for line in (_prune_records(store, keep), unlisted and f"gpudoc: {unlisted}") if line]
    return "\n".join(said) or None


def _prune_records(store: RunStore, keep: int) -> str | None:
    if len(store.ids()) <= keep:
        return None  # the usual case: one directory listing
    plan = plan_prune(store, keep=keep, at_most=PRUNE_PER_RUN)
    removed = remove(store, plan.remove)
    if not removed:
        return None
    what = "the oldest run record" if len(removed) == 1 else f"the {len(removed)} oldest run records"
    later = f" ({plan.later} more go after the next runs)" if plan.later else ""
    return f"gpudoc: removed {what} beyond [runs] keep = {keep}{later}"


def prune_unlisted(store: RunStore, keep: int) -> str | None:
    """``[runs] keep`` for the originals of edits no record lists: the oldest ``PRUNE_PER_RUN``
    beyond the newest ``keep`` go; the line that says what went (None when nothing did)."""
    plan = plan_unlisted(store, keep=keep, at_most=PRUNE_PER_RUN)
    removed = remove_unlisted(store, plan.remove)
    if not removed:
        return None
    later = f" ({plan.later} more go later)" if plan.later else ""
    return (f"removed the {len(removed)} oldest file state(s) kept before edits no run lists "
            f"(fix --log --apply, profile new --force) beyond [runs] keep = {keep}, from "
            f"{unlisted_folder(store.home)}{later}")


@dataclass
class UnlistedPlan:
    remove: list[str] = field(default_factory=list)  # fingerprints, oldest first
    total: int = 0
    later: int = 0


def plan_unlisted(store: RunStore, *, keep: int | None = None, older_than_days: float | None = None,
                  now: float | None = None, at_most: int | None = None) -> UnlistedPlan:
    """``plan_prune``'s rule for the originals in ``originals/unlisted/``, by when each was kept."""
    folder = unlisted_folder(store.home)
    try:
        if not all(stat.S_ISDIR(os.lstat(level).st_mode) for level in (folder.parent, folder)):
            return UnlistedPlan()  # a link or a file planted in its place: nothing there is gpudoc's
        with os.scandir(folder) as entries:
            kept = sorted((entry.stat(follow_symlinks=False).st_mtime, entry.name) for entry in entries
                          if entry.is_file(follow_symlinks=False))
    except OSError:
        return UnlistedPlan()  # none kept yet
    plan = UnlistedPlan(total=len(kept))
    candidates = kept[:max(0, len(kept) - keep)] if keep is not None else list(kept)
    if older_than_days is not None:
        cutoff = (time.time() if now is None else now) - older_than_days * 86400
        candidates = [(at, name) for at, name in candidates if at < cutoff]
    if at_most is not None and len(candidates) > at_most:
        plan.later = len(candidates) - at_most
        candidates = candidates[:at_most]
    plan.remove = [name for _, name in candidates]
    return plan


def remove_unlisted(store: RunStore, names: list[str]) -> list[str]:
    """Remove these unlisted originals (this user's files only); the names removed."""
    folder, uid, removed = unlisted_folder(store.home), os.getuid(), []
    for name in names:
        try:
            info = os.lstat(folder / name)
            if stat.S_ISREG(info.st_mode) and info.st_uid == uid:
                os.unlink(folder / name)
                removed.append(name)
        except OSError:
            continue
    return removed


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
