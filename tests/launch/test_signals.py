"""Signal escalation and exit statuses (SPEC: the child's, 128+N, 130 on the user's Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from gpudoc.launch.signals import decode_wait_status, exit_status, interrupt_signal, signal_name


def test_ctrl_c_ladder():
    assert [interrupt_signal(n) for n in (1, 2, 3, 4)] == [signal.SIGINT, signal.SIGTERM, signal.SIGKILL,
                                                           signal.SIGKILL]


def test_exit_status_rules():
    assert exit_status(0, None, interrupted_by=None) == 0
    assert exit_status(3, None, interrupted_by=None) == 3
    assert exit_status(None, signal.SIGKILL, interrupted_by=None) == 137
    # torchrun exits 1 after the user's Ctrl-C: the user sees 130.
    assert exit_status(1, None, interrupted_by=signal.SIGINT) == 130
    assert exit_status(None, signal.SIGKILL, interrupted_by=signal.SIGINT) == 130
    assert exit_status(1, None, interrupted_by=signal.SIGTERM) == 143
    # A job that handles the interrupt and finishes cleanly reports success.
    assert exit_status(0, None, interrupted_by=signal.SIGINT) == 0


def test_decode_real_wait_statuses():
    for code, expected in ((0, (0, None)), (5, (5, None))):
        pid = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"]).pid
        _, status = os.waitpid(pid, 0)
        assert decode_wait_status(status) == expected
    pid = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]).pid
    _, status = os.waitpid(pid, 0)
    assert decode_wait_status(status) == (None, signal.SIGTERM)
    assert signal_name(signal.SIGTERM) == "SIGTERM" and signal_name(None) == ""
