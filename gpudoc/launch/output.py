"""Reading the job's output: coalesced bursts while it runs, what is left once it is gone."""

from __future__ import annotations

import errno
import fcntl
import os
import select
import time

from gpudoc.launch.tee import Tee

CHUNK = 1 << 18  # one read: large enough for throughput, small enough to stay bounded
PIPE_SIZE = 1 << 20  # ask the kernel for a 1 MiB pipe: fewer wake-ups under heavy output
F_SETPIPE_SZ = 1031


def output_pipe() -> tuple[int, int]:
    """The pipe the job writes its stdout and stderr into (read end, write end), enlarged."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(r, F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # above the system's pipe-max-size: the default size still works
    return r, w


def read_burst(out: int, *, coalesce: bool) -> bytes | None:
    """One read; with ``coalesce`` (a pty, which hands out ~4 KiB per read) as many as are ready,
    up to CHUNK, so the log and the terminal get one write per burst instead of dozens.
    b"" at the end of the output, None when nothing was there after all."""
    try:
        data = os.read(out, CHUNK)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno != errno.EIO:  # EIO: the pty's last writer closed
            raise
        return b""
    if not coalesce or not data or len(data) >= CHUNK:
        return data
    parts = [data]
    total = len(data)
    while total < CHUNK:
        try:
            more = os.read(out, CHUNK - total)
        except (BlockingIOError, OSError):
            break  # drained for now (EIO/EOF comes back on the next poll)
        if not more:
            break
        parts.append(more)
        total += len(more)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def drain_until_eof(out: int, tee: Tee, seconds: float) -> None:
    """Every process is gone; read what is still buffered until EOF (bounded in time)."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        ready, _, _ = select.select([out], [], [], left)
        if not ready:
            return
        try:
            data = os.read(out, CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            return
        if not data:
            return
        tee.write(data)


def drain_available(out: int, tee: Tee) -> None:
    """What can be read right now, without waiting (gpudoc is ending, whatever happened)."""
    os.set_blocking(out, False)
    while True:
        try:
            data = os.read(out, CHUNK)
        except OSError:
            return
        if not data:
            return
        tee.write(data)
