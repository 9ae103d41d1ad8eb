"""`gpudoc logs`: the exact bytes; -f follows a live run from another process until it ends."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.conftest import REPO, gpudoc_cli
from tests.launch.helpers import EMIT, Gpudoc, job_env, run_dirs


def test_prints_the_latest_or_a_named_run_exactly(isolated_home):
    first = gpudoc_cli("run", "--no-check", "--", "python", "-c", "print('one')")
    second = gpudoc_cli("run", "--no-check", "--", "python", "-c", "import sys; sys.stdout.write('two, no newline')")
    assert first.returncode == second.returncode == 0
    assert gpudoc_cli("logs").stdout == "two, no newline"
    first_id = run_dirs(isolated_home)[0].name
    assert gpudoc_cli("logs", first_id).stdout == "one\n"
    assert gpudoc_cli("logs", first_id[:-2]).stdout == "one\n"  # a unique prefix is enough


def test_unknown_run_and_no_runs_are_clear_errors(isolated_home):
    none = gpudoc_cli("logs")
    assert none.returncode == 2 and "no runs" in none.stderr
    gpudoc_cli("run", "--no-check", "--", "true")
    unknown = gpudoc_cli("logs", "nope")
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr


def test_follow_prints_until_the_run_ends(isolated_home):
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "lines", "30", "0.05", cwd=isolated_home)
    deadline = time.monotonic() + 20
    while not run_dirs(isolated_home) and time.monotonic() < deadline:
        time.sleep(0.02)
    follower = subprocess.run([sys.executable, "-m", "gpudoc", "logs", "-f"], cwd=isolated_home,
                              env=job_env(PYTHONPATH=str(REPO)), capture_output=True, timeout=60)
    assert g.wait(30) == 0
    assert follower.returncode == 0, follower.stderr
    assert follower.stdout == b"".join(f"line {i:05d}\n".encode() for i in range(30))
