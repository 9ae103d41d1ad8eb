"""The live scan: every byte reaches the scanner, in order, without slowing a flood down."""

from __future__ import annotations

from gpudoc.diagnose.stream import SignatureScanner
from gpudoc.launch.scan import WINDOW_S, LiveScan

OOM_LINE = (b"[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
            b"total capacity of 23.68 GiB of which 1.06 GiB is free.\n")


class Recorder:
    def __init__(self):
        self.data = bytearray()

    def feed(self, data):
        self.data.extend(data)
        return []


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _log(tmp_path, chunks):
    path = tmp_path / "output.log"
    path.write_bytes(b"".join(chunks))
    return path


def test_calm_output_is_scanned_as_it_arrives(tmp_path):
    chunks = [b"step 1\n", b"step 2\n", OOM_LINE]
    events = []
    scan = LiveScan(_log(tmp_path, chunks), events.extend, scanner_factory=SignatureScanner)
    for chunk in chunks:
        scan.feed(chunk)
    assert scan.backlog == 0
    assert [(e.cause, e.rank) for e in events] == [("gpu_oom", 1)]


def test_a_flood_defers_scanning_and_catches_up_from_the_log(tmp_path):
    chunks = [bytes([65 + i % 26]) * 300_000 + b"\n" for i in range(40)] + [OOM_LINE]
    clock = Clock()
    made: list[Recorder] = []  # the scan's own scanner first; a peek makes one of its own

    def factory():
        made.append(Recorder())
        return made[-1]

    scan = LiveScan(_log(tmp_path, chunks), lambda e: None, scanner_factory=factory, budget=0.1, clock=clock)
    for chunk in chunks:
        clock.now += 0.001  # 12 MB in 41 ms: a flood
        scan.feed(chunk, busy=True)
    assert scan.backlog > 0  # the tee did not wait for the scanner
    while scan.catch_up(1 << 20):
        pass
    assert bytes(scan.scanner.data) == b"".join(chunks)  # nothing skipped, nothing repeated


def test_flood_scanning_stays_within_its_budget(tmp_path):
    chunk = b"x" * 262_144
    chunks = [chunk] * 200
    clock = Clock()

    class Slow(Recorder):
        def feed(self, data):
            clock.now += len(data) / 100e6  # a 100 MB/s scanner
            return super().feed(data)

    scan = LiveScan(_log(tmp_path, chunks), lambda e: None, scanner_factory=Slow, budget=0.1, clock=clock)
    for c in chunks:
        clock.now += len(c) / 100e6  # output at 100 MB/s, as fast as the scanner
        scan.feed(c, busy=True)
    elapsed = clock.now
    assert scan.scan_s <= 0.1 * elapsed + 0.011  # the budget, give or take one slice
    assert 0 < scan.scanned < scan.written


def test_unreadable_log_is_skipped_not_looped(tmp_path):
    scan = LiveScan(tmp_path / "missing.log", lambda e: None, scanner_factory=Recorder)
    scan.written = 100
    assert scan.catch_up() is False
    assert scan.skipped == 100 and scan.backlog == 0


def test_behind_a_flood_a_peek_sees_the_newest_failure_first_and_once(tmp_path):
    flood = [b"[rank0]: step 0 | loss 1.0 | lr 3e-04\n" * 30_000 for _ in range(4)]  # ~4.6 MB
    chunks = [*flood, OOM_LINE]
    events = []
    clock = Clock()
    scan = LiveScan(_log(tmp_path, chunks), events.extend, scanner_factory=SignatureScanner, budget=0.0,
                    clock=clock)
    for chunk in chunks:  # all of it busy: nothing fits the (zero) budget
        clock.now += 0.3
        scan.feed(chunk, busy=True)
    # The peek at the last chunk read the newest megabyte: the OOM is reported, the backlog is not.
    assert [(e.cause, e.rank) for e in events] == [("gpu_oom", 1)]
    assert scan.backlog > 4_000_000
    clock.now += 1.0
    while scan.catch_up(scan.slice_bytes):
        pass
    assert scan.backlog == 0
    assert len(events) == 1  # the catch-up reached the same line: not reported twice


def test_gaps_in_a_flood_are_no_lull_and_the_lull_after_it_is(tmp_path):
    # A pty hands a flood out a few KiB at a time: between two pieces the launcher finds nothing
    # to read and calls idle(). Catching up there would scan in line after all (at the tee's
    # cost); the budget holds, and the real lull after the flood catches everything up.
    chunks = [b"step 1 | loss 0.5\n" * 3641] * 300  # 64 KiB pieces, 19.7 MB at 100 MB/s
    clock = Clock()

    class Slow(Recorder):
        def feed(self, data):
            clock.now += len(data) / 100e6  # a 100 MB/s scanner
            return super().feed(data)

    scan = LiveScan(_log(tmp_path, chunks), lambda e: None, scanner_factory=Slow, budget=0.1, clock=clock)
    before_known = None  # what the scan took in line before its first window said "flood"
    for c in chunks:
        clock.now += len(c) / 100e6
        scan.feed(c)  # a pty's read is never a full buffer
        scan.idle()
        if before_known is None and scan.idle_wait_ms() > 0:
            before_known = scan.scan_s
    assert before_known is not None and before_known < WINDOW_S
    assert scan.scan_s - before_known <= 0.1 * clock.now + 0.011  # the budget, give or take one slice
    assert scan.backlog > 0 and scan.idle_wait_ms() > 0  # held back: the launcher need not spin
    for _ in range(100):  # the output stopped: the launcher calls idle() after each idle_wait_ms()
        clock.now += scan.idle_wait_ms() / 1000
        scan.idle()
    assert scan.backlog == 0 and scan.idle_wait_ms() == 0
    assert bytes(scan.scanner.data) == b"".join(chunks)  # nothing skipped, nothing repeated
