"""`gpudoc logs`: the exact bytes; -f follows a live run from another process until it ends."""

from __future__ import annotations

import os
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


def test_a_record_copied_from_another_run_never_prints_that_runs_log(isolated_home):
    from gpudoc.runs.store import RECORD

    for code in ("print('one')", "print('two')"):
        assert gpudoc_cli("run", "--no-check", "--", "python", "-c", code).returncode == 0
    first, second = run_dirs(isolated_home)
    (second / RECORD).write_text((first / RECORD).read_text())
    named = gpudoc_cli("logs", second.name)
    assert named.returncode == 2 and named.stdout == ""
    assert named.stderr == (f"gpudoc: {second / RECORD}: unreadable run record: its id '{first.name}' is not its "
                            "directory's name (copied from another run?)\n")
    # Without a RUN_ID the newest readable run is printed, and the skipped one is said before it.
    latest = gpudoc_cli("logs")
    assert latest.returncode == 0 and latest.stdout == "one\n"
    assert latest.stderr.startswith(f"gpudoc: note: skipped 1 unreadable run record(s) in {first.parent} "
                                    f"({second.name}: its id")
    assert latest.stderr.count("\n") == 1  # once, not again at the end


def test_follow_stops_when_the_record_can_no_longer_be_read(isolated_home):
    from gpudoc.commands.logs import _still_running
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RECORD, RunStore

    store = RunStore(isolated_home / ".gpudoc")
    record = RunRecord(id="20260101-000000000-aaaaaa", command=["t"], cwd=".", launcher_pid=os.getpid())
    store.create(record)
    assert _still_running(store, record.id)
    (store.run_dir(record.id) / RECORD).write_text("[]")  # waiting will not make it readable
    assert not _still_running(store, record.id)
