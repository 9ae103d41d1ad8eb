"""The live failure scan: the job's output goes through the failure scanner without ever slowing
the tee.

A training job prints a few lines per step, so every chunk is scanned as it arrives and a GPU OOM
is seen within milliseconds. A job that floods its output faster than the scanner reads (the
scanner runs at roughly 100 MB/s, the tee at several hundred) would be slowed down by scanning in
line: then the scan falls behind, spends at most ``budget`` of the wall time, and catches up from
the log file (the backlog lives on disk, not in memory) as soon as the output calms down. While
it is behind, it also peeks at the newest output every ``PEEK_INTERVAL_S`` with a scanner of its
own: a rank's OOM at the end of a flood ends the job without waiting for the whole backlog (what
the peek reported is not reported again when the catch-up reaches it). The run record's
diagnosis does not depend on this scan: it reads the log's tail at the end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

WINDOW_S = 0.1
FLOOD_BYTES_PER_S = 8 * 1024 * 1024
SCANNER_LOAD_S = 0.05  # importing the scanner's signatures, budgeted like a slice
PEEK_INTERVAL_S = 0.25
PEEK_BYTES = 1 << 20  # the newest output a peek reads: a failure and the lines around it


class LineScanner(Protocol):
    """What the live scan feeds the job's output to (``gpudoc.diagnose.stream.SignatureScanner``)."""

    def feed(self, data: bytes) -> Sequence[Any]: ...


class LiveScan:
    def __init__(self, log_path: Path, on_events: Callable[[Sequence[Any]], None], *,
                 scanner_factory: Callable[[], LineScanner], budget: float = 0.1, slice_bytes: int = 1 << 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log_path = log_path
        self.on_events = on_events
        self.scanner_factory = scanner_factory
        self.budget = budget
        self.slice_bytes = slice_bytes
        self.clock = clock
        self.scanner: LineScanner | None = None
        self.written = 0  # bytes of output so far (all of them are in the log, in order)
        self.scanned = 0  # bytes the scanner has seen
        self.skipped = 0  # bytes never scanned (the log could not be read back)
        self.scan_s = 0.0
        self.started = clock()
        self._fd: int | None = None
        self._window_start = self.started
        self._window_bytes = 0
        self._flood = False
        self._slice_cost = 0.0
        self._next_peek = self.started
        self._peeked: set[str] = set()  # lines a peek reported ahead of the catch-up

    @property
    def backlog(self) -> int:
        return self.written - self.scanned

    def feed(self, data: bytes, *, busy: bool = False) -> None:
        """``data`` was just written to the log; ``busy``: the read filled the whole buffer."""
        in_step = self.scanned == self.written
        self.written += len(data)
        busy = self._flooding(len(data)) or busy
        if not busy:
            if in_step:
                self._scan(data)
                self.scanned += len(data)
            else:
                self.catch_up(self.slice_bytes + len(data))
        elif self._within_budget():
            if in_step:
                self._scan(data)
                self.scanned += len(data)
            else:
                self.catch_up(self.slice_bytes)
        self.peek()

    def idle(self) -> None:
        """No output was waiting: scan a slice of the backlog. Not while the output still floods:
        a pty hands a flood out 4 KiB at a time with gaps between the pieces, so a moment with
        nothing to read is no lull, and catching up in every gap would cost more than the tee
        (then only within the budget, as in ``feed``)."""
        if not self.backlog:
            return
        if self._flooding(0) and not self._within_budget():
            self.peek()
            return
        self.catch_up(self.slice_bytes)

    def idle_wait_ms(self) -> int:
        """How long the launcher may wait for output before calling ``idle``: not at all once the
        output has calmed down (catch up now), a tenth of a window while a flood holds the
        catch-up back (output wakes it sooner; the lull after the flood is seen within a window)."""
        return int(WINDOW_S * 100) if self._flood and not self._within_budget() else 0

    def peek(self) -> None:
        """While behind, scan the newest output (at most every PEEK_INTERVAL_S) with a scanner of
        its own: a failure at the end of a flood is seen without waiting for the backlog."""
        now = self.clock()
        if self.backlog <= PEEK_BYTES or now < self._next_peek:
            return
        self._next_peek = now + PEEK_INTERVAL_S
        start = self.written - PEEK_BYTES
        data = self._read_at(start, PEEK_BYTES)
        newline = data.find(b"\n")
        if newline < 0:
            return
        scanner = self.scanner_factory()
        began = self.clock()
        events = [event for event in scanner.feed(data[newline + 1:]) if _line(event) not in self._peeked]
        self.scan_s += self.clock() - began
        if events:
            self._peeked.update(_line(event) for event in events)
            self.on_events(events)

    def catch_up(self, limit: int | None = None) -> bool:
        """Scan up to ``limit`` bytes of the backlog from the log file; True while some is left."""
        self.peek()
        left = self.backlog if limit is None else min(limit, self.backlog)
        while left > 0:
            data = self._read_back(min(left, self.slice_bytes))
            if not data:
                # The log is incomplete (disk full) or unreadable: what it lacks cannot be scanned.
                self.skipped += self.backlog
                self.scanned = self.written
                return False
            self._scan(data)
            self.scanned += len(data)
            left -= len(data)
        return self.backlog > 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _flooding(self, size: int) -> bool:
        # Output rate over the last window: no training loop prints this fast for long.
        now = self.clock()
        span = now - self._window_start
        if span >= WINDOW_S:
            self._flood = self._window_bytes / span > FLOOD_BYTES_PER_S
            self._window_start, self._window_bytes = now, 0
        self._window_bytes += size
        return self._flood

    def _within_budget(self) -> bool:
        # Only when the next slice (or loading the scanner) still fits in the budget.
        expected = self._slice_cost if self.scanner is not None else SCANNER_LOAD_S
        return self.scan_s + expected <= self.budget * (self.clock() - self.started)

    def _read_back(self, size: int) -> bytes:
        return self._read_at(self.scanned, size)

    def _read_at(self, offset: int, size: int) -> bytes:
        try:
            if self._fd is None:
                self._fd = os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC)
            return os.pread(self._fd, size, offset)
        except (OSError, TypeError):
            return b""

    def _scan(self, data: bytes) -> None:
        start = self.clock()
        if self.scanner is None:
            self.scanner = self.scanner_factory()  # imported on first use: silent jobs never pay
        events = self.scanner.feed(data)
        took = self.clock() - start
        self.scan_s += took
        self._slice_cost = took * (self.slice_bytes / max(len(data), 1)) if len(data) >= 4096 else self._slice_cost
        if events and self._peeked:
            events = [event for event in events if _line(event) not in self._peeked]
        if events:
            self.on_events(events)


def _line(event: Any) -> str:
    return str(getattr(event, "line", event))
