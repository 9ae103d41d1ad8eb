"""Which earlier gpudoc run a process belongs to: one lookup, by dictionary, for every reader.

A process belongs to a run when the run recorded its PID with the same start time (the PID was
not reused since), or when it is in the run's process group and started while the run did (a
reused group id is not a match).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpudoc.procs.identity import same_start
from gpudoc.runs.record import RunRecord

# Stamps in run records have whole seconds.
_STAMP_SLACK_S = 1.0


@dataclass(frozen=True)
class Owner:
    run_id: str
    live: bool  # the run has not ended (its gpudoc may still be running it)


class RunOwners:
    """An index of the runs' processes: built once per command from the run store's newest
    records; an older run is found through ``lookup``, by the run id its processes carry."""

    def __init__(self, records: Iterable[RunRecord],
                 lookup: Callable[[int], RunRecord | None] | None = None) -> None:
        self._lookup = lookup
        self._by_pid: dict[int, list[tuple[float, RunRecord]]] = {}
        self._by_group: dict[int, list[RunRecord]] = {}
        for record in records:
            for entry in record.pids or ():
                pid, created = entry.get("pid"), entry.get("create_time")
                if isinstance(pid, int) and isinstance(created, (int, float)):
                    self._by_pid.setdefault(pid, []).append((float(created), record))
            if record.process_group and record.process_group > 1:
                self._by_group.setdefault(record.process_group, []).append(record)

    def owner(self, pid: int, create_time: float | None, pgid: int | None) -> Owner | None:
        """The run this process belongs to (the newest that claims it), or None."""
        for created, record in reversed(self._by_pid.get(pid, ())):
            if same_start(created, create_time):
                return _owner(record)
        if pgid is not None and create_time is not None:
            for record in reversed(self._by_group.get(pgid, ())):
                if _in_group(record, create_time):
                    return _owner(record)
        if self._lookup is not None:
            # An older run than the index holds: the record the process names must claim it too,
            # by the same rules as the index's own records.
            named = self._lookup(pid)
            if named is not None:
                return RunOwners([named]).owner(pid, create_time, pgid)
        return None


def _in_group(record: RunRecord, create_time: float) -> bool:
    start, end = record.started_epoch, record.ended_epoch
    return start is not None and create_time + _STAMP_SLACK_S >= start and (
        end is None or create_time <= end + _STAMP_SLACK_S)


def _owner(record: RunRecord) -> Owner:
    return Owner(record.id, live=record.status == "running" and record.ended_at is None)
