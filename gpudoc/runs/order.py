"""The one order of runs: what `runs` lists, and what `fix`, `logs`, `watch` and `runs show` mean
by "the latest run" (the last of this order).

Run ids sort by their start second. Within one second the id alone cannot say which came last: a
retry chain relaunches at once, two nodes sharing a ``GPUDOC_HOME`` start at once, and an older
gpudoc wrote ids without milliseconds, so a random suffix would decide. There, a run that another
run of that second retried comes before it, then the millisecond the id carries (none: 0), then
the job's own start (its processes' create_time), then the id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records are handed in: `gpudoc check` reaches the store, never a record
    from gpudoc.runs.record import RunRecord

_SECOND = len("YYYYMMDD-HHMMSS")


def second_of(run_id: str) -> str:
    return run_id[:_SECOND]


def chronological(records: Iterable[RunRecord]) -> list[RunRecord]:
    """``records`` oldest first, by the one tie-break."""
    found = list(records)
    parents = {(second_of(r.id), r.parent) for r in found if r.parent}

    def key(record: RunRecord) -> tuple[str, bool, int, float, str]:
        starts = [float(p.get("create_time") or 0) for p in record.pids or () if isinstance(p, dict)]
        return (second_of(record.id), (second_of(record.id), record.id) not in parents, _millisecond(record.id),
                min(starts) if starts else 0.0, record.id)

    return sorted(found, key=key)


def _millisecond(run_id: str) -> int:
    """The millisecond an id carries after its second (``YYYYMMDD-HHMMSSmmm-...``); 0 for an older id."""
    stamp = run_id[_SECOND:_SECOND + 3]
    return int(stamp) if len(stamp) == 3 and stamp.isdigit() else 0


def newest_window(ids: Sequence[str], newest: int) -> Sequence[str]:
    """The ids to read for the ``newest`` runs: the last ``newest`` ids and every other id of the
    oldest second among them (its order is only known once its records are read)."""
    if newest <= 0:
        return ()
    start = max(0, len(ids) - newest)
    while start > 0 and second_of(ids[start - 1]) == second_of(ids[start]):
        start -= 1
    return ids[start:]
