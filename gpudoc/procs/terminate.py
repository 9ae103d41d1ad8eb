"""The one way gpudoc ends processes: SIGTERM, a grace period, SIGKILL, PID-reuse safe.

Used by the launcher (the job it started, with its process group) and by ``gpudoc clean`` (this
user's strays, each re-verified by the caller's ``may_signal`` before every signal).
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpudoc.procs.identity import ProcessRef, signal_group, signal_if_same

KILL_WAIT_S = 5.0


@dataclass
class Termination:
    """What ending a set of processes came to."""

    terminated: list[ProcessRef] = field(default_factory=list)  # ended after SIGTERM
    killed: list[ProcessRef] = field(default_factory=list)  # needed SIGKILL
    survivors: list[ProcessRef] = field(default_factory=list)  # outlived even SIGKILL
    skipped: list[tuple[ProcessRef, str]] = field(default_factory=list)  # not signalled, and why
    signals: list[tuple[int, int]] = field(default_factory=list)  # (pid, signal) actually sent


def terminate(refs: Iterable[ProcessRef], *, grace_s: float, pgid: int | None = None,
              kill_wait_s: float = KILL_WAIT_S, may_signal: Callable[[ProcessRef], str | None] | None = None,
              on_reaped: Callable[[int, int], None] | None = None) -> Termination:
    """SIGTERM ``refs`` (and the process group ``pgid``, when given), wait up to ``grace_s`` for
    them to end, SIGKILL what is left and wait ``kill_wait_s`` more.

    Before every signal the process must still be the same one (its start time unchanged) and,
    when given, ``may_signal(ref)`` must return None (else it returns why not). ``on_reaped``
    sees every child of gpudoc reaped meanwhile.
    """
    result = Termination()
    refs = list(refs)
    signal_group(pgid, signal.SIGTERM)
    sent = [r for r in refs if _send(r, signal.SIGTERM, result, may_signal)]
    refused = {ref for ref, _ in result.skipped}
    left = _wait_gone([r for r in refs if r not in refused], grace_s, on_reaped)
    result.terminated = [r for r in sent if r not in left]
    if left:
        signal_group(pgid, signal.SIGKILL)
        killed = [r for r in left if _send(r, signal.SIGKILL, result, may_signal)]
        still = _wait_gone(left, kill_wait_s, on_reaped)
        result.killed = [r for r in killed if r not in still]
        result.survivors = still
    return result


def _send(ref: ProcessRef, sig: int, result: Termination, may_signal: Callable[[ProcessRef], str | None] | None) -> bool:
    if may_signal is not None:
        why = may_signal(ref)
        if why is not None:
            result.skipped.append((ref, why))
            return False
    if not signal_if_same(ref, sig):
        return False
    result.signals.append((ref.pid, sig))
    return True


def reap_children() -> list[tuple[int, int]]:
    """Collect every exited child (zombies of the job re-parented to gpudoc included)."""
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            break
        if pid == 0:
            break
        reaped.append((pid, status))
    return reaped


def _wait_gone(refs: list[ProcessRef], timeout: float, on_reaped: Callable[[int, int], None] | None) -> list[ProcessRef]:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        for pid, status in reap_children():
            if on_reaped is not None:
                on_reaped(pid, status)
        left = [r for r in refs if r.is_running()]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
