"""The job's terminal when gpudoc gives it a pty: the user's settings and window size, and the
keys typed while gpudoc is in the foreground."""

from __future__ import annotations

import fcntl
import os
import termios

from gpudoc.launch.tee import write_all


def winsize(fd: int) -> bytes | None:
    try:
        return fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
    except OSError:
        return None


def setup_slave(slave: int, stdin_fd: int | None, term_fd: int | None) -> None:
    # Start from the user's terminal settings (control characters), then: no echo (the
    # user's terminal already echoes what is typed) and no output processing ("\n" stays
    # "\n"), so the log holds exactly the bytes the job wrote; the user's own terminal
    # still turns "\n" into "\r\n" on display.
    source = next((fd for fd in (stdin_fd, term_fd) if fd is not None and os.isatty(fd)), None)
    try:
        attrs = termios.tcgetattr(source if source is not None else slave)
        attrs[1] &= ~termios.OPOST
        attrs[3] &= ~(termios.ECHO | termios.ECHONL)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    except (termios.error, OSError):
        pass
    copy_winsize(slave, term_fd, stdin_fd)


def copy_winsize(target: int, *sources: int | None) -> None:
    """The first terminal's window size among ``sources``, onto ``target`` (the job's pty)."""
    for fd in sources:
        if fd is not None and os.isatty(fd):
            size = winsize(fd)
            if size is not None and size != b"\0" * 8:
                try:
                    fcntl.ioctl(target, termios.TIOCSWINSZ, size)
                except OSError:
                    pass
                return


def stdin_is_ours(fd: int | None) -> bool:
    """Whether gpudoc may read the user's keys: only while it is in the terminal's foreground
    (reading from the background would stop it)."""
    if fd is None:
        return False
    try:
        if os.isatty(fd) and os.tcgetpgrp(fd) != os.getpgrp():
            return False
    except OSError:
        return False
    return True


def forward_input(stdin_fd: int | None, master: int | None) -> bool:
    """Copy what the user typed to the job; False at the end of input."""
    if stdin_fd is None:
        return False
    try:
        data = os.read(stdin_fd, 4096)
    except OSError:
        data = b""
    if not data:
        # End of input: the job reads end-of-file too (VEOF on an empty canonical line).
        write_quietly(master, b"\x04")
        return False
    write_quietly(master, data)
    return True


def write_quietly(master: int | None, data: bytes) -> None:
    if master is None:
        return
    try:
        write_all(master, data)
    except OSError:
        pass  # the job closed its terminal: what it would have read is nobody's now
