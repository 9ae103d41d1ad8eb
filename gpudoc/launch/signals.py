"""What gpudoc does with the signals it receives while a job runs, and the exit status it reports.

gpudoc runs the job in its own session, so the terminal's Ctrl-C reaches gpudoc only; gpudoc
decides what the job gets. Pure functions here; ``spawn`` installs the handlers.
"""

from __future__ import annotations

import signal

# Ctrl-C once asks politely (the job's own KeyboardInterrupt handling, torchrun's forwarding),
# twice insists, three times ends it.
_INTERRUPT_LADDER = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def interrupt_signal(count: int) -> int:
    """The signal for the ``count``-th Ctrl-C (1-based)."""
    return _INTERRUPT_LADDER[min(max(count, 1), len(_INTERRUPT_LADDER)) - 1]


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
