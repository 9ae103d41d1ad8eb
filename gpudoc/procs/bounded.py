"""Run a command gpudoc does not control (the simulation helper, a notify command) within bounds.

The command runs in a session and process group of its own, so that everything it starts can be
ended together, and so that a terminal's Ctrl-C meant for gpudoc does not reach it. Its output is
read as it comes and only the last ``tail_bytes`` of each stream are kept: a command printing
gigabytes costs gpudoc a fixed amount of memory. gpudoc waits for the command's own process, never
for the end of its output: a process it started in the background and left holding the pipes
does not hold gpudoc. At the time limit the whole group is killed.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

TAIL_BYTES = 64 * 1024
# After the command's own process ends: how long its last output may take to arrive.
_DRAIN_S = 0.5


@dataclass(frozen=True)
class Finished:
    """How a bounded command ended: its exit status (None when stopped at the limit) and the end
    of what it wrote."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False


class _Tail:
    """The last ``limit`` bytes of a stream, however much of it arrives."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:  # trim in batches: the copy is paid once per limit
            del self.data[:-self.limit]

    def text(self) -> str:
        return bytes(self.data[-self.limit:]).decode("utf-8", "replace")


def run_bounded(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str], cwd: str | None = None,
                input_text: str | None = None, tail_bytes: int = TAIL_BYTES, end_group: bool = True) -> Finished:
    """Run ``argv`` to its end or ``timeout_s``, whichever comes first. ``end_group`` also ends what
    the command left running when it exited (a helper's children); without it, what a command put in
    the background lives on in its own session (a notify command's ``curl ... &``).

    Raises ``OSError`` when the command cannot be started."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env), cwd=cwd,
                            start_new_session=True)
    tails = {proc.stdout.fileno(): _Tail(tail_bytes), proc.stderr.fileno(): _Tail(tail_bytes)}  # type: ignore[union-attr]
    pending = (input_text or "").encode()
    timed_out = False
    with selectors.DefaultSelector() as selector:
        for fd in tails:
            selector.register(fd, selectors.EVENT_READ)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout_s
        drain_until: float | None = None
        while True:
            now = time.monotonic()
            if drain_until is None and proc.poll() is not None:
                if end_group:
                    _kill_group(proc.pid)
                drain_until = now + _DRAIN_S
            stop = drain_until if drain_until is not None else deadline
            if now >= stop or not selector.get_map():
                break
            for key, _ in selector.select(min(stop - now, 0.1)):
                if key.events & selectors.EVENT_WRITE:
                    pending = _feed(proc.stdin, selector, pending)  # type: ignore[arg-type]
                    continue
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except OSError:
                    chunk = b""
                if chunk:
                    tails[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
        if drain_until is None and proc.poll() is None:
            if selector.get_map() or time.monotonic() >= deadline:
                timed_out = True
                _kill_group(proc.pid)
            else:  # every pipe closed: the command is ending on its own
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _kill_group(proc.pid)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass  # a helper gone mid-input: its pipe is broken, nothing to flush
    returncode = proc.wait()
    out, err = (tail.text() for tail in tails.values())
    return Finished(None if timed_out else returncode, out, err, timed_out)


def _feed(stdin: IO[bytes], selector: selectors.BaseSelector, pending: bytes) -> bytes:
    """Write what the pipe takes of ``pending``; close stdin when all is written or nobody reads."""
    try:
        written = os.write(stdin.fileno(), pending[:1 << 16])
        pending = pending[written:]
    except BlockingIOError:
        return pending
    except OSError:  # it stopped reading (exited, or closed its stdin)
        pending = b""
    if not pending:
        selector.unregister(stdin.fileno())
        try:
            stdin.close()
        except OSError:
            pass
    return pending


def _kill_group(pgid: int) -> None:
    """SIGKILL to the whole group the command leads (its session's): it and everything it started
    there. A group already gone is no error."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
