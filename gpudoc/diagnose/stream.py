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

from gpudoc.diagnose.lines import normalise
from gpudoc.diagnose.signatures import STREAM_CAUSES, WARNING, match_line

__all__ = ["Event", "SignatureScanner"]

# Keywords of the signatures the stream reports (a superset is fine: it is only a gate).
_GATE = re.compile(
    rb"out of memory|Out of memory|Tried to allocate|OutOfMemory|RESOURCE_EXHAUSTED|OOM when allocating"
    rb"|_ALLOC_FAILED|ALLOCATION_FAILED|_NOT_INITIALIZED|MemoryAllocation|OUT_OF_MEMORY|hipError"
    rb"|oom-kill|oom_kill|OOMKilled|oom_reaper|invoked oom|killed by signal|DefaultCPUAllocator|bad_alloc"
    rb"|MemoryError|[Bb]us error|BUS ERROR|shared memory|/dev/shm|/torch_|Errno 12"
    rb"|Watchdog caught|Timeout at NCCL|[Ww]atchdog got stuck|NCCL timeout|Timed out waiting"
    rb"|exitcode|SIGKILL|SIGBUS|^Killed|\nKilled|\rKilled"
)
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

    def feed(self, data: bytes) -> list[Event]:
        if not data:
            return []
        self.bytes_seen += len(data)
        head = bytes(self._partial[-_OVERLAP:]) if self._partial else b""
        hit = _GATE.search(head + data[:4096] if head else data) is not None
        if not hit and len(data) > 4096:
            hit = _GATE.search(data) is not None
        last_eol = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if last_eol < 0:
            self._append(data)
            self._partial_hit |= hit
            return []
        if not hit and not self._partial_hit:
            # Nothing to report in the lines this chunk completes: keep only the new partial line.
            self._partial.clear()
            self._partial_hit = False
            self._append(data[last_eol + 1:])
            return []
        complete = bytes(self._partial) + data[: last_eol + 1]
        self._partial.clear()
        self._partial_hit = False
        rest = data[last_eol + 1:]
        self._append(rest)
        self._partial_hit = bool(rest) and _GATE.search(rest) is not None
        return self._scan(complete)

    def flush(self) -> list[Event]:
        if not self._partial:
            return []
        pending, hit = bytes(self._partial), self._partial_hit
        self._partial.clear()
        self._partial_hit = False
        return self._scan(pending) if hit or _GATE.search(pending) else []

    def _append(self, data: bytes) -> None:
        room = self.max_line - len(self._partial)
        if room > 0:
            self._partial += data[:room]

    def _scan(self, block: bytes) -> list[Event]:
        events = []
        for raw in _EOL.split(block):
            if not raw or not _GATE.search(raw):
                continue
            if len(raw) > self.max_line:
                raw = raw[: self.max_line]
            text, rank = normalise(raw.decode("utf-8", errors="replace"))
            m = match_line(text)
            if m is None or m.cause not in STREAM_CAUSES or WARNING.search(text):
                continue
            events.append(Event(m.cause, rank, text))
        return events
