"""The one terminate: SIGTERM, grace, SIGKILL; the caller's veto and the PID-reuse guard before each signal."""

from __future__ import annotations

import signal
import subprocess
import sys

from gpudoc.procs.identity import ProcessRef, start_time
from gpudoc.procs.terminate import terminate


def _sleeper(ignore_term: bool = False) -> subprocess.Popen:
    code = ("import signal, time\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "print('ok', flush=True)\ntime.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ok\n"
    return proc


def test_a_vetoed_process_is_never_signalled_and_says_why():
    proc = _sleeper()
    try:
        ref = ProcessRef(proc.pid, start_time(proc.pid))
        ended = terminate([ref], grace_s=0.2, may_signal=lambda r: "another user's process")
        assert ended.signals == [] and ended.skipped == [(ref, "another user's process")]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_pid_is_left_alone_and_a_vanished_one_is_no_error():
    proc = _sleeper()
    try:
        stale = ProcessRef(proc.pid, start_time(proc.pid) - 1000.0)  # the PID now names "another" process
        gone = ProcessRef(2**22 + 4321, 1.0)
        ended = terminate([stale, gone], grace_s=0.2)
        assert ended.signals == [] and ended.survivors == []
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_is_enough_for_a_process_that_listens():
    proc = _sleeper()
    ended = terminate([ProcessRef(proc.pid, start_time(proc.pid))], grace_s=5)
    assert [r.pid for r in ended.terminated] == [proc.pid] and ended.killed == []
    assert ended.signals == [(proc.pid, signal.SIGTERM)]
