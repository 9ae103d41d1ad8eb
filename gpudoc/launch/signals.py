"""What gpudoc does with the signals it receives while a job runs, and the exit status it reports.

gpudoc runs the job in its own session, so the terminal's Ctrl-C reaches gpudoc only; gpudoc
decides what the job gets. The rules are pure functions; ``SignalRelay`` installs the
launcher's handlers for one run.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any, Callable

# Ctrl-C once asks politely (the job's own KeyboardInterrupt handling, torchrun's forwarding),
# twice insists, three times ends it.
_INTERRUPT_LADDER = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def interrupt_signal(count: int) -> int:
    """The signal for the ``count``-th Ctrl-C (1-based)."""
    return _INTERRUPT_LADDER[min(max(count, 1), len(_INTERRUPT_LADDER)) - 1]


def ctrl_c(count: int) -> tuple[int, str]:
    """The signal the ``count``-th Ctrl-C sends the job, and what gpudoc says about it."""
    sig = interrupt_signal(count)
    hint = {signal.SIGINT: "press Ctrl-C again to send SIGTERM",
            signal.SIGTERM: "press Ctrl-C again to send SIGKILL"}.get(signal.Signals(sig), "")
    return sig, f"Ctrl-C: {signal_name(sig)} sent to the job" + (f" ({hint})" if hint else "")


def forwarded(signum: int, grace_s: float) -> str:
    """What gpudoc says when it forwards a SIGTERM (or SIGQUIT) to the job."""
    return (f"{signal_name(signum)} received: forwarded to the job; "
            f"SIGKILL in {grace_s:g} s if it is still running")


def signal_name(sig: int | None) -> str:
    if sig is None:
        return ""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def decode_wait_status(status: int) -> tuple[int | None, int | None]:
    """``os.waitpid`` status -> (exit code, terminating signal); exactly one is set."""
    import os

    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None, None


def exit_status(exit_code: int | None, term_signal: int | None, *, interrupted_by: int | None) -> int:
    """gpudoc's own exit status for a finished job (SPEC: the child's, 128+N, 130 on user Ctrl-C).

    When the user (or a supervisor) signalled gpudoc and the job then failed, the job's own status
    is a consequence of that signal (torchrun exits 1 after SIGINT), so the signal is reported:
    130 for Ctrl-C, 143 for SIGTERM. A job that handles the signal and still exits 0 reports 0.
    """
    own = 128 + term_signal if term_signal is not None else exit_code if exit_code is not None else 1
    if interrupted_by is not None and own != 0:
        return 128 + int(interrupted_by)
    return own


class SignalRelay:
    """gpudoc's handlers for the signals it relays to a job, installed for one run; a wake-up pipe
    (``wake_fd``) becomes readable whenever one arrives, so the output loop never sleeps through it."""

    def __init__(self, handlers: dict[int, Callable[[int, FrameType | None], None]]) -> None:
        self.wake_fd, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # SIGCHLD only needs to wake the loop (through the wake-up pipe).
        handlers = {signal.SIGCHLD: _wake_only, **handlers}
        self._previous: dict[int, Any] = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
        self._previous_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def restore(self) -> None:
        """The handlers (and wake-up fd) from before, put back; the pipe closed."""
        signal.set_wakeup_fd(self._previous_wakeup)
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler)
            except (TypeError, ValueError, OSError):
                pass
        for fd in (self.wake_fd, self._wake_w):
            os.close(fd)


def _wake_only(signum: int, frame: FrameType | None) -> None:
    """A signal whose only job is to wake the loop (its wake-up byte does that)."""
