"""Finding and ending a job's processes: real processes, real signals, PID-reuse guards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from gpudoc.launch import reaper
from gpudoc.procs.identity import ProcessRef, start_time
from gpudoc.procs.terminate import terminate


def test_create_time_matches_psutil():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert start_time(proc.pid) == psutil.Process(proc.pid).create_time()
        assert start_time(2**22 + 12345) is None
    finally:
        proc.kill()
        proc.wait()


def test_job_processes_include_descendants_in_other_sessions_and_the_group():
    # A child that starts a grandchild in a new session (like torchrun's workers).
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
            "print('ok', flush=True)\n"
            "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ok\n"
        found = reaper.job_processes(proc.pid, proc.pid)
        kids = psutil.Process(proc.pid).children(recursive=True)
        assert {p.pid for p in found} == {proc.pid} | {k.pid for k in kids}
        assert len(found) == 2
        reaped = {}
        ended = terminate(found, pgid=proc.pid, grace_s=2.0, on_reaped=reaped.__setitem__)
        assert ended.survivors == [] and {r.pid for r in ended.terminated} == {p.pid for p in found}
        # terminate() reaps whatever child of ours exits (that is its job in gpudoc).
        assert os.WTERMSIG(reaped[proc.pid]) == signal.SIGTERM
        proc.returncode = -signal.SIGTERM
        for kid in kids:
            assert not kid.is_running() or kid.status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            proc.kill()


def test_terminate_escalates_to_sigkill():
    proc = subprocess.Popen([sys.executable, "-c",
                             "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ok', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ok\n"
    reaped = []
    started = time.monotonic()
    ended = terminate([ProcessRef(proc.pid, start_time(proc.pid))], grace_s=0.3,
                      on_reaped=lambda pid, status: reaped.append((pid, status)))
    assert ended.survivors == [] and time.monotonic() - started < 5
    assert [r.pid for r in ended.killed] == [proc.pid] and (proc.pid, signal.SIGKILL) in ended.signals
    assert reaped and reaped[0][0] == proc.pid and os.WTERMSIG(reaped[0][1]) == signal.SIGKILL
    proc.returncode = -9


def test_a_reused_pid_is_never_signalled():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stale = ProcessRef(proc.pid, start_time(proc.pid) - 1000.0)  # "another process"
        assert reaper.signal_processes([stale], signal.SIGKILL) == 0
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_subreaper_adopts_orphans():
    # In a fresh interpreter: become a subreaper, start a child that leaves an orphan behind.
    code = (
        "import os, subprocess, sys, time\n"
        "from gpudoc.launch import reaper\n"
        "assert reaper.become_subreaper()\n"
        "mid = subprocess.Popen([sys.executable, '-c', \"import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); print(p.pid)\"], "
        "stdout=subprocess.PIPE)\n"
        "orphan = int(mid.stdout.readline())\n"
        "mid.wait()\n"
        "time.sleep(0.2)\n"
        "print(orphan in (reaper.children_of(os.getpid()) or []), flush=True)\n"
        "from gpudoc.procs.terminate import terminate\n"
        "print(terminate(reaper.job_processes(None, None), grace_s=2).survivors == [], flush=True)\n"
    )
    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.split() == ["True", "True"], done.stderr
