"""The guard's idea of "the job": real processes, told apart by group, session, marker and age."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gpudoc.launch.guard import job_members


def _sleeper(env_extra: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, **kw)


def test_members_are_the_group_and_the_marked_processes_started_since_the_launch():
    before = _sleeper({"GPUDOC_RUN_ID": "run-a"}, start_new_session=True)  # marked, but older
    time.sleep(1.2)
    since = time.time() - 0.5
    leader = _sleeper(start_new_session=True)  # the job's first process: its group and session
    marked = _sleeper({"GPUDOC_RUN_ID": "run-a"}, start_new_session=True)  # a worker in its own session
    other_run = _sleeper({"GPUDOC_RUN_ID": "run-b"}, start_new_session=True)
    stranger = _sleeper(start_new_session=True)
    procs = [before, leader, marked, other_run, stranger]
    try:
        time.sleep(0.3)  # the environment is final once the interpreter has exec'd
        found = {ref.pid for ref in job_members(leader.pid, "run-a", since)}
        assert found == {leader.pid, marked.pid}
        assert {ref.pid for ref in job_members(leader.pid, None, since)} == {leader.pid}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
