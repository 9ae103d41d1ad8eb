"""The live scanner: same answers whatever the chunking, bounded memory, cheap on plain output."""

from __future__ import annotations

import time

from gpudoc.diagnose.stream import Event, SignatureScanner

OOM = (b"[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 2 has a total "
       b"capacity of 23.68 GiB of which 512.00 MiB is free.\n")
LOG = (b"step 1 loss 2.0\n" + b"  3%|#         | 3/100 [00:01<00:30]\r  4%|#  | 4/100\r"
       + OOM + b"[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
       b"WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n"
       + b"Killed\n")


def _feed_in(chunks):
    scanner = SignatureScanner()
    events = []
    for chunk in chunks:
        events += scanner.feed(chunk)
    return events + scanner.flush()


def test_whole_log():
    events = _feed_in([LOG])
    assert [(e.cause, e.rank) for e in events] == [("gpu_oom", 2), ("nccl_timeout", 0), ("host_oom", None)]
    assert isinstance(events[0], Event) and "Tried to allocate" in events[0].line


def test_every_split_point_gives_the_same_events():
    whole = _feed_in([LOG])
    for cut in range(1, len(LOG)):
        assert _feed_in([LOG[:cut], LOG[cut:]]) == whole, cut


def test_byte_by_byte():
    assert _feed_in([LOG[i:i + 1] for i in range(len(LOG))]) == _feed_in([LOG])


def test_last_line_without_newline_needs_flush():
    scanner = SignatureScanner()
    assert scanner.feed(OOM.rstrip(b"\n")) == []
    assert [e.cause for e in scanner.flush()] == ["gpu_oom"]


def test_partial_line_is_bounded():
    scanner = SignatureScanner(max_line=1024)
    for _ in range(1000):
        scanner.feed(b"x" * 4096)  # a progress bar that never ends its line
    assert len(scanner._partial) <= 1024
    assert scanner.feed(b"\n" + OOM)[0].cause == "gpu_oom"


def test_warnings_and_other_errors_are_not_reported():
    text = (b"UserWarning: CUDA out of memory during warmup, retrying\n"
            b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
            b"ValueError: bad\n")
    assert _feed_in([text]) == []


def test_invalid_utf8_does_not_break_it():
    assert _feed_in([b"\xff\xfe\x80 garbage\n" + OOM])[0].cause == "gpu_oom"


def test_plain_output_is_cheap():
    chunk = (b"step 12345 | loss 1.2345 | lr 3.0e-04 | tok/s 123456 | mem 20.1 GiB\n" * 1000)  # ~70 KB
    scanner = SignatureScanner()
    start = time.perf_counter()
    for _ in range(300):  # ~21 MB
        assert scanner.feed(chunk) == []
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"{21 / elapsed:.0f} MB/s"


TRACEBACK = (b"[rank2]: Traceback (most recent call last):\n"
             b"[rank2]:   File \"train.py\", line 7, in allocate\n"
             b"[rank2]:     raise torch.OutOfMemoryError(\"CUDA out of memory. Tried to allocate 8.00 GiB\")\n"
             b"[rank2]:   File \"train.py\", line 9, in step\n"
             b"[rank2]:     except torch.cuda.OutOfMemoryError:  # Killed by the OOM killer otherwise\n"
             + OOM)


def test_traceback_source_lines_are_not_events_whatever_the_chunking():
    # The frame header that makes the next line source code carries no keyword: it may arrive
    # in a chunk the gate skips.
    whole = _feed_in([TRACEBACK])
    assert [(e.cause, e.rank) for e in whole] == [("gpu_oom", 2)]
    assert whole[0].line.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB")
    for cut in range(1, len(TRACEBACK)):
        assert _feed_in([TRACEBACK[:cut], TRACEBACK[cut:]]) == whole, cut
    assert _feed_in(TRACEBACK.splitlines(keepends=True)) == whole
    assert _feed_in([TRACEBACK[i:i + 1] for i in range(len(TRACEBACK))]) == whole
