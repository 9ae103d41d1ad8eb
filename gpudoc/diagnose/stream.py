"""Failure signatures in a live byte stream, for the launcher's tee.

The launcher pushes everything the job prints through :meth:`SignatureScanner.feed`, possibly at
hundreds of MB/s, so the common path is one regex search over the new bytes (plus a few bytes of
the line in progress, for a keyword split across chunks). Only when that finds a keyword are lines
split, normalised and matched against the full signatures. A line in progress is kept up to
``max_line`` bytes: a progress bar without newlines cannot grow memory without bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudoc.diagnose.lines import MESSAGE, TracebackTracker, split_prefix
from gpudoc.diagnose.signatures import STREAM_CAUSES, WARNING, match_line

__all__ = ["Event", "SignatureScanner"]

# Keywords of the signatures the stream reports (a superset is fine: it is only a gate). Plain
# substring tests run at memchr speed; one regex alternation of these runs ~50x slower.
_KEYWORDS = (
    b"ut of memory", b"OutOfMemory", b"Tried to allocate", b"_ALLOC", b"OUT_OF_MEMORY", b"MemoryAllocation",
    b"OOM", b"_NOT_INITIALIZED", b"oom-kill", b"oom_kill", b"oom_reaper", b"illed", b"DefaultCPUAllocator",
    b"bad_alloc", b"MemoryError", b"us error", b"US ERROR", b"shared memory", b"/dev/shm", b"/torch_",
    b"Watchdog caught", b"Timeout at NCCL", b"watchdog got stuck", b"NCCL timeout", b"Timed out waiting",
    b"Heartbeat monitor timed out", b"no heartbeat of its watchdog",
    b"exitcode", b"SIGBUS", b"Cannot allocate memory", b"RESOURCE_EXHAUSTED",
)


def _gate(data: bytes) -> bool:
    return any(key in data for key in _KEYWORDS)


_OVERLAP = 48  # longer than any gate keyword
_EOL = re.compile(rb"[\r\n]")


@dataclass(frozen=True)
class Event:
    cause: str  # gpu_oom | host_oom | shm | nccl_timeout
    rank: int | None
    line: str


class SignatureScanner:
    """Incremental scanner: ``feed(chunk)`` returns the failure events completed by that chunk.

    ``flush()`` reports a last line that never got its newline (call it at end of stream).
    """

    def __init__(self, *, max_line: int = 64 * 1024) -> None:
        self.max_line = max_line
        self._partial = bytearray()
        self._partial_hit = False  # the line in progress contains a gate keyword
        self.bytes_seen = 0
        # Which lines are traceback source code: a "raise OutOfMemoryError(" line is not an OOM.
        self._tracker = TracebackTracker()

    def feed(self, data: bytes) -> list[Event]:
        if not data:
            return []
        self.bytes_seen += len(data)
        head = bytes(self._partial[-_OVERLAP:]) if self._partial else b""
        hit = _gate(data) or (bool(head) and _gate(head + data[:_OVERLAP]))
        last_eol = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if last_eol < 0:
            self._append(data)
            self._partial_hit |= hit
            return []
        if not hit and not self._partial_hit:
            # Nothing to report in the lines this chunk completes: keep only the new partial line.
            # Its last complete line may open a traceback frame whose source line comes next;
            # the lines before it went unread, so what the tracker knew of them is stale.
            self._tracker.reset()
            self._track(self._last_line(data, last_eol))
            self._partial.clear()
            self._partial_hit = False
            self._append(data[last_eol + 1:])
            return []
        complete = bytes(self._partial) + data[: last_eol + 1]
        self._partial.clear()
        self._partial_hit = False
        rest = data[last_eol + 1:]
        self._append(rest)
        self._partial_hit = bool(rest) and _gate(rest)
        return self._scan(complete)

    def flush(self) -> list[Event]:
        if not self._partial:
            return []
        pending, hit = bytes(self._partial), self._partial_hit
        self._partial.clear()
        self._partial_hit = False
        return self._scan(pending) if hit or _gate(pending) else []

    def _append(self, data: bytes) -> None:
        room = self.max_line - len(self._partial)
        if room > 0:
            self._partial += data[:room]

    def _last_line(self, data: bytes, last_eol: int) -> bytes:
        end = last_eol
        while end > 0 and data[end - 1] in b"\r\n":
            end -= 1
        start = max(data.rfind(b"\n", 0, end), data.rfind(b"\r", 0, end)) + 1
        line = data[start:end]
        return bytes(self._partial) + line if start == 0 else line

    def _track(self, raw: bytes) -> str:
        text, rank, indent = split_prefix(raw[: self.max_line].decode("utf-8", errors="replace"))
        return self._tracker.kind(text, rank, indent)

    def _scan(self, block: bytes) -> list[Event]:
        events = []
        for raw in _EOL.split(block):
            if not raw:
                continue
            if len(raw) > self.max_line:
                raw = raw[: self.max_line]
            text, rank, indent = split_prefix(raw.decode("utf-8", errors="replace"))
            # Every line goes through the tracker, keyword or not: the frame header that makes
            # the next line source code has none.
            if self._tracker.kind(text, rank, indent) != MESSAGE or not _gate(raw):
                continue
            m = match_line(text)
            if m is None or m.cause not in STREAM_CAUSES or WARNING.search(text):
                continue
            events.append(Event(m.cause, rank, text))
        return events
