"""The guard's idea of "the job": real processes, told apart by group, session, marker and age."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from gpudoc.launch.guard import job_members
from gpudoc.procs import identity
from gpudoc.procs.identity import START_TIME_EARLY_S


def _sleeper(env_extra: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, **kw)


def _run_id() -> str:
    """A run id of this test's own: tests running beside it (other workers, other sessions) mark theirs."""
    return f"run-{uuid.uuid4().hex[:12]}"


def test_members_are_the_group_and_the_marked_processes_started_since_the_launch():
    run_a, run_b = _run_id(), _run_id()
    before = _sleeper({"GPUDOC_RUN_ID": run_a}, start_new_session=True)  # marked, but older
    time.sleep(START_TIME_EARLY_S + 0.3)  # older than the launch by more than the reading's tolerance
    since = time.time() - START_TIME_EARLY_S  # as start_guard sets it
    leader = _sleeper(start_new_session=True)  # the job's first process: its group and session
    marked = _sleeper({"GPUDOC_RUN_ID": run_a}, start_new_session=True)  # a worker in its own session
    other_run = _sleeper({"GPUDOC_RUN_ID": run_b}, start_new_session=True)
    stranger = _sleeper(start_new_session=True)
    procs = [before, leader, marked, other_run, stranger]
    try:
        time.sleep(0.3)  # the environment is final once the interpreter has exec'd
        found = {ref.pid for ref in job_members(leader.pid, run_a, since)}
        assert found == {leader.pid, marked.pid}
        assert {ref.pid for ref in job_members(leader.pid, None, since)} == {leader.pid}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_boot_time_the_kernel_truncated_still_finds_the_jobs_processes(monkeypatch):
    """/proc/stat's boot time is whole seconds: on a machine booted at x.72 s every start time reads
    0.72 s early, and a process started just after the launch seems to predate it. Simulated here
    through the boot-time cache, from the exact boot instant (the wall clock less the time since boot)."""
    exact_boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    monkeypatch.setattr(identity, "_boot_time", exact_boot - 0.72)
    run_id = _run_id()
    launched = time.time()
    since = launched - START_TIME_EARLY_S  # as start_guard sets it
    leader = _sleeper(start_new_session=True)
    marked = _sleeper({"GPUDOC_RUN_ID": run_id}, start_new_session=True)
    try:
        time.sleep(0.3)  # the environment is final once the interpreter has exec'd
        # The simulation holds: the job's first process reads as started before the launch itself.
        assert identity.start_time(leader.pid) < launched
        assert {ref.pid for ref in job_members(leader.pid, run_id, since)} == {leader.pid, marked.pid}
    finally:
        for proc in (leader, marked):
            proc.kill()
            proc.wait()
