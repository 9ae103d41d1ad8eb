"""The tee: every chunk the job prints goes to the log first, then to the terminal.

Plain ``os.write`` on file descriptors: no Python-level buffering, so the log and the terminal get
exactly the bytes the job wrote and memory stays at one read buffer whatever the output volume.
When the terminal goes away (EPIPE, EIO, ENXIO after a hang-up) the tee stops writing there and
goes on with the log; when the log cannot be written (disk full) it says so once and goes on with
the terminal. Neither failure stops the job.

On a terminal (pty mode) the terminal's writes go through a writer thread: the kernel's terminal
layer is slow (it costs as much as everything else the tee does together), and while that thread
waits in it the launcher goes on reading the job's next output, writing the log and scanning. The
queue between them is bounded, so a terminal that stops reading (Ctrl-S, a paused pane) still
holds the job back as before, and ``flush()`` waits until everything queued is on the terminal:
gpudoc's own messages never overtake the job's output.
"""

from __future__ import annotations

import errno
import os
import queue
import select
import threading
import time
from typing import Callable

# Errors that mean "the reader is gone for good", not "try again".
_GONE = {errno.EPIPE, errno.EIO, errno.ENXIO, errno.EBADF, errno.ECONNRESET, errno.EINVAL}


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte, across partial writes and descriptors someone left non-blocking."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            # A shared terminal set O_NONBLOCK by another program: wait, do not drop bytes.
            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]


class Tee:
    def __init__(self, log_fd: int | None, term_fd: int | None, *,
                 warn: Callable[[str], None] | None = None, threaded: bool = False) -> None:
        self.log_fd = log_fd
        self.term_fd = term_fd
        self.warn = warn or (lambda message: None)
        self.log_error: str | None = None
        self.terminal_lost = False
        self.bytes = 0
        self._writer = _TerminalWriter(self) if threaded and term_fd is not None else None

    def write(self, data: bytes) -> None:
        if self._writer is None:
            self._write_now(data)
            return
        self.bytes += len(data)
        self._write_log(data)
        if self.term_fd is not None:
            self._writer.put(data)

    def flush(self, timeout_s: float = 0.5) -> None:
        """Wait until what was written is on the terminal, for at most ``timeout_s``: a terminal
        that stopped reading must not block the caller (a signal handler) for ever."""
        if self._writer is not None:
            self._writer.drain(timeout_s)

    def close(self) -> None:
        """Flush, then stop the writer thread (the tee writes synchronously from then on)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.stop()

    def _write_log(self, data: bytes) -> None:
        if self.log_fd is not None:
            try:
                write_all(self.log_fd, data)
            except OSError as exc:
                self.log_error = f"{os.strerror(exc.errno or 0)}"
                self.log_fd = None
                self.warn(f"cannot write the run's log any more ({self.log_error}); "
                          "the job goes on, its output only reaches the terminal")

    def _write_terminal(self, data: bytes) -> None:
        term_fd = self.term_fd
        if term_fd is None:
            return
        try:
            write_all(term_fd, data)
        except OSError as exc:
            if exc.errno in _GONE:
                self.lose_terminal()
            else:
                raise

    def _write_now(self, data: bytes) -> None:
        self.bytes += len(data)
        self._write_log(data)
        self._write_terminal(data)

    def lose_terminal(self) -> None:
        """The terminal is gone (hang-up, closed pipe): from now on only the log is written."""
        self.terminal_lost = True
        self.term_fd = None


class _TerminalWriter:
    """The thread that writes the tee's terminal side, behind a bounded queue."""

    QUEUED_CHUNKS = 16  # at most this many reads (a few MiB) between the job and the terminal

    def __init__(self, tee: Tee) -> None:
        self._tee = tee
        self._queue: queue.Queue[bytes | None] = queue.Queue(self.QUEUED_CHUNKS)
        self._thread = threading.Thread(target=self._run, name="gpudoc-terminal", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        self._queue.put(data)

    def drain(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.002)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            data = self._queue.get()
            try:
                if data is None:
                    return
                self._tee._write_terminal(data)
            except OSError as exc:  # not a "terminal gone" error: say so once, keep the log going
                self._tee.warn(f"cannot write to the terminal ({os.strerror(exc.errno or 0)}); the log goes on")
                self._tee.lose_terminal()
            finally:
                self._queue.task_done()
