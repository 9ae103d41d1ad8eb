"""Run a command gpudoc does not control (the simulation helper, a notify command) within bounds.

The command runs in a session and process group of its own, so that everything it starts can be
ended together, and so that a terminal's Ctrl-C meant for gpudoc does not reach it. Its output is
read as it comes and only the last ``tail_bytes`` of each stream are kept: a command printing
gigabytes costs gpudoc a fixed amount of memory. gpudoc waits for the command's own process, never
for the end of its output: a process it started in the background and left holding the pipes
does not hold gpudoc. At the time limit the whole group is killed. ``run_bounded`` runs a command to
its end; ``LineSession`` keeps one running and asks it one line at a time, within the same bounds.
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


def _feed(stdin: IO[bytes], selector: selectors.BaseSelector, pending: bytes, *, close: bool = True) -> bytes:
    """Write what the pipe takes of ``pending``; when all is written or nobody reads, stop watching
    stdin, and with ``close`` close it (the end of the input; a ``LineSession`` keeps it open)."""
    try:
        written = os.write(stdin.fileno(), pending[:1 << 16])
        pending = pending[written:]
    except BlockingIOError:
        return pending
    except OSError:  # it stopped reading (exited, or closed its stdin)
        pending = b""
    if not pending:
        selector.unregister(stdin.fileno())
        if not close:
            return pending
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


@dataclass(frozen=True)
class Reply:
    """One answer of a ``LineSession``: the answer line (without its marker), or None when the command
    ended or hit the time limit first, with the end of its stderr and, once it ended, its status."""

    answer: str | None
    stderr: str
    returncode: int | None = None
    timed_out: bool = False


class LineSession:
    """A command spoken to one request line at a time, kept running between requests (the simulation
    helper, asked for one micro batch after another, imports its libraries once).

    Each answer is the first line of stdout after the request that starts with ``marker``; any other
    output (a factory's prints) is read as it comes and dropped, a line longer than ``limit`` without
    ever being held whole, and only the last ``limit`` bytes of stderr are kept. Like ``run_bounded``,
    the command runs in a session and process group of its own; a request past its time limit, and
    ``close``, end the whole group.

    Raises ``OSError`` when the command cannot be started."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, marker: bytes,
                 limit: int = TAIL_BYTES) -> None:
        self.marker, self.limit = marker, limit
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(env), cwd=cwd, start_new_session=True)
        stdin, stdout, stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
        if stdin is None or stdout is None or stderr is None:  # each was asked for as a pipe
            raise OSError("the command was started without its pipes")
        self._pipes = (stdin, stdout, stderr)
        self._stderr = _Tail(limit)
        self._line = bytearray()  # stdout's current line, while it may still be an answer
        self._skipping = False  # inside a stdout line too long to be an answer
        self._ended = False

    def __enter__(self) -> LineSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ask(self, request: str, *, timeout_s: float) -> Reply:
        """Send ``request`` (one line) and wait for the answer, at most ``timeout_s``."""
        if self._ended:
            return self._reply(None)
        pending = request.encode() + b"\n"
        stdin, stdout, stderr = self._pipes
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(stdout.fileno(), selectors.EVENT_READ)
            selector.register(stderr.fileno(), selectors.EVENT_READ)
            os.set_blocking(stdin.fileno(), False)
            selector.register(stdin.fileno(), selectors.EVENT_WRITE)
            exited_at: float | None = None
            while True:
                now = time.monotonic()
                if exited_at is None and self.proc.poll() is not None:
                    exited_at = now
                # Ended: its last output may take a moment, but a child it left holding the pipe does not
                # hold gpudoc.
                if exited_at is not None and (now - exited_at >= _DRAIN_S or stdout.fileno() not in selector.get_map()):
                    self._end()
                    return self._reply(None)
                if now >= deadline:
                    self._end()
                    return self._reply(None, timed_out=True)
                for key, _ in selector.select(min(deadline - now, 0.1)):
                    if key.events & selectors.EVENT_WRITE:
                        pending = _feed(stdin, selector, pending, close=False)  # the next request follows
                        continue
                    try:
                        chunk = os.read(key.fd, 1 << 16)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        selector.unregister(key.fd)
                    elif key.fd == stderr.fileno():
                        self._stderr.add(chunk)
                    elif (answer := self._scan(chunk)) is not None:
                        return self._reply(answer)

    def close(self) -> None:
        """End the command: stdin closed (the end of the requests), then its whole group."""
        if not self._ended:
            try:
                self._pipes[0].close()
            except OSError:
                pass  # it stopped reading: the pipe is broken, nothing to flush
        self._end()

    def _scan(self, chunk: bytes) -> str | None:
        """Feed stdout's ``chunk``; the first answer line it completes, if any."""
        for piece in chunk.splitlines(keepends=True):
            if not self._skipping:
                self._line += piece
            complete = piece.endswith((b"\n", b"\r"))  # a progress bar's \r ends its line too
            if not self._skipping and len(self._line) > self.limit:
                self._skipping, self._line = True, bytearray()
            if complete:
                line, self._line, self._skipping = bytes(self._line), bytearray(), False
                if line.startswith(self.marker):
                    return line[len(self.marker):].decode("utf-8", "replace").strip()
        return None

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            self.proc.wait(timeout=_DRAIN_S)  # its own end, after its stdin closed
        except subprocess.TimeoutExpired:
            pass
        _kill_group(self.proc.pid)
        self.proc.wait()
        stderr = self._pipes[2]
        os.set_blocking(stderr.fileno(), False)
        try:  # its last words, as far as they are in the pipe already
            self._stderr.add(os.read(stderr.fileno(), self.limit))
        except OSError:
            pass  # nothing there (BlockingIOError), or gone
        for stream in self._pipes:
            try:
                stream.close()
            except OSError:
                pass  # stdin with unwritten bytes to a reader that is gone

    def _reply(self, answer: str | None, *, timed_out: bool = False) -> Reply:
        return Reply(answer, self._stderr.text(), None if timed_out or not self._ended else self.proc.returncode,
                     timed_out)
