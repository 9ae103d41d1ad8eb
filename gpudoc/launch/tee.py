"""The tee: every chunk the job prints goes to the log first, then to the terminal.

Plain ``os.write`` on file descriptors: no Python-level buffering, so the log and the terminal get
exactly the bytes the job wrote and memory stays at one read buffer whatever the output volume.
When the terminal goes away (EPIPE, EIO, ENXIO after a hang-up) the tee stops writing there and
goes on with the log; when the log cannot be written (disk full) it says so once and goes on with
the terminal. Neither failure stops the job.
"""

from __future__ import annotations

import errno
import os
import select
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
                 warn: Callable[[str], None] | None = None) -> None:
        self.log_fd = log_fd
        self.term_fd = term_fd
        self.warn = warn or (lambda message: None)
        self.log_error: str | None = None
        self.terminal_lost = False
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        if self.log_fd is not None:
            try:
                write_all(self.log_fd, data)
            except OSError as exc:
                self.log_error = f"{os.strerror(exc.errno or 0)}"
                self.log_fd = None
                self.warn(f"cannot write the run's log any more ({self.log_error}); "
                          "the job goes on, its output only reaches the terminal")
        if self.term_fd is not None:
            try:
                write_all(self.term_fd, data)
            except OSError as exc:
                if exc.errno in _GONE:
                    self.lose_terminal()
                else:
                    raise

    def lose_terminal(self) -> None:
        """The terminal is gone (hang-up, closed pipe): from now on only the log is written."""
        self.terminal_lost = True
        self.term_fd = None
