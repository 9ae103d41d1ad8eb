"""The launcher against real torchrun jobs (gloo on the CPU) and real signals.

Every test asserts the exit status, that the log is complete, what the record says, and that no
process of the job is left afterwards.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.launch.helpers import (
    EMIT, Gpudoc, assert_in_order, assert_no_leftovers, job_env, last_log, last_record, marker,
    rank_lines, torchrun,
)

pytestmark = pytest.mark.slow


def test_clean_torchrun_run_exits_0_with_every_line_logged(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("ok", mark), cwd=isolated_home)
    assert g.wait(90) == 0, g.stderr
    log = last_log(isolated_home)
    for rank in (0, 1):
        assert_in_order(log, rank_lines(rank) + [f"rank{rank} done\n".encode()])
    assert bytes(g.out) == log  # the terminal (here: a pipe) got exactly the log's bytes
    record = last_record(isolated_home)
    assert (record["status"], record["exit_code"], record["cause"]) == ("ok", 0, "ok")
    assert len(record["pids"]) >= 3  # torchrun and both workers, as they appeared
    assert all(p["create_time"] for p in record["pids"])
    assert "finished" in g.stderr
    assert_no_leftovers(mark)


def test_rank_raising_is_the_recorded_cause(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("raise", mark), cwd=isolated_home)
    assert g.wait(90) == 1, g.stderr
    record = last_record(isolated_home)
    assert (record["status"], record["exit_code"], record["cause"]) == ("failed", 1, "error")
    assert record["diagnosis"]["rank"] == 1
    assert b"boom from rank 1" in last_log(isolated_home)
    assert f"gpudoc fix {record['id']}" in g.stderr
    assert_no_leftovers(mark)


def test_rank_oom_and_exit_is_gpu_oom(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("oom_exit", mark), cwd=isolated_home)
    assert g.wait(90) == 1, g.stderr
    record = last_record(isolated_home)
    assert record["cause"] == "gpu_oom"
    assert record["diagnosis"]["rank"] == 1
    assert record["diagnosis"]["requested_bytes"] == 2 * 1024**3
    assert_in_order(last_log(isolated_home), rank_lines(0))
    assert_no_leftovers(mark)


def test_oom_on_a_hanging_rank_ends_the_whole_job_after_the_grace(isolated_home):
    # Rank 1 prints a CUDA OOM and hangs; rank 0 waits in a collective. Without fail-fast both
    # would wait for the 30-minute collective timeout.
    (isolated_home / "gpudoc.toml").write_text("[run]\noom_grace_s = 1\n")
    mark = marker()
    started = time.monotonic()
    g = Gpudoc("run", "--no-check", "--", *torchrun("oom_block", mark), cwd=isolated_home)
    rc = g.wait(90)
    took = time.monotonic() - started
    assert rc != 0, g.stderr
    record = last_record(isolated_home)
    assert record["cause"] == "gpu_oom"
    assert record["ended_by"] == "gpu_oom"
    assert record["status"] == "failed"
    assert "ending the whole job" in g.stderr
    assert took < 45, took
    assert_no_leftovers(mark)


def test_rank_killed_with_sigkill(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sigkill", mark), cwd=isolated_home)
    assert g.wait(90) == 1, g.stderr
    record = last_record(isolated_home)
    assert record["cause"] in ("host_oom", "signal"), record["diagnosis"]
    assert_in_order(last_log(isolated_home), rank_lines(1))
    assert_no_leftovers(mark)


def test_ctrl_c_reports_130_and_leaves_nothing(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sleep", mark), cwd=isolated_home)
    g.wait_for(b"ready", count=2, timeout=60)
    g.signal(signal.SIGINT)  # what the terminal's Ctrl-C delivers to gpudoc
    assert g.wait(60) == 130, g.stderr  # torchrun itself exits 1 after SIGINT
    record = last_record(isolated_home)
    assert record["status"] == "interrupted"
    assert record["exit_code"] == 130
    assert "SIGINT sent to the job" in g.stderr
    assert_in_order(last_log(isolated_home), rank_lines(0) + [b"rank0 ready\n"])
    assert_no_leftovers(mark)


def test_ctrl_c_three_times_escalates_to_sigkill(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "ignore_int_term", mark, cwd=isolated_home)
    g.wait_for(b"ready", timeout=30)
    g.signal(signal.SIGINT)  # ignored by the job
    time.sleep(0.3)
    g.signal(signal.SIGINT)  # -> SIGTERM, ignored too
    time.sleep(0.3)
    assert g.proc.poll() is None
    g.signal(signal.SIGINT)  # -> SIGKILL
    assert g.wait(30) == 130
    assert "SIGTERM sent to the job" in g.stderr and "SIGKILL sent to the job" in g.stderr
    assert last_record(isolated_home)["signal"] == signal.SIGKILL
    assert_no_leftovers(mark)


def test_sigterm_is_forwarded_and_reported(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sleep", mark), cwd=isolated_home)
    g.wait_for(b"ready", count=2, timeout=60)
    g.signal(signal.SIGTERM)
    assert g.wait(60) == 143, g.stderr
    assert last_record(isolated_home)["status"] == "interrupted"
    assert "forwarded to the job" in g.stderr
    assert_no_leftovers(mark)


def test_sigterm_escalates_to_sigkill_after_the_grace(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "ignore_term", mark, cwd=isolated_home,
               env=job_env(GPUDOC_TERM_GRACE_S="1"))
    g.wait_for(b"ready", timeout=30)
    started = time.monotonic()
    g.signal(signal.SIGTERM)
    assert g.wait(30) == 143, g.stderr
    assert time.monotonic() - started < 10
    record = last_record(isolated_home)
    assert record["signal"] == signal.SIGKILL  # the job itself died of the escalation
    assert_no_leftovers(mark)


def test_torchrun_sigkilled_leaves_no_worker_behind(isolated_home):
    import psutil

    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sleep", mark), cwd=isolated_home)
    g.wait_for(b"ready", count=2, timeout=60)
    launcher = psutil.Process(g.proc.pid).children()[0]  # torchrun
    workers = launcher.children()
    assert len(workers) == 2
    launcher.kill()  # torchrun's workers survive this on their own
    assert g.wait(60) == 128 + signal.SIGKILL, g.stderr
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    assert_no_leftovers(mark)


@pytest.mark.parametrize("command, status, words", [
    (["definitely-not-a-command-xyz"], 127, "command not found: definitely-not-a-command-xyz"),
    (["./script.sh"], 126, "not executable"),
])
def test_not_found_and_not_executable(isolated_home, command, status, words):
    (isolated_home / "script.sh").write_text("#!/bin/sh\necho hi\n")  # no execute bit
    g = Gpudoc("run", "--no-check", "--", *command, cwd=isolated_home)
    assert g.wait(30) == status
    assert words in g.stderr
    assert not (isolated_home / ".gpudoc" / "runs").exists() or not any((isolated_home / ".gpudoc" / "runs").iterdir())


def test_child_exit_status_and_signal_death_are_passed_through(isolated_home):
    g = Gpudoc("run", "--no-check", "--", "python", "-c", "import sys; sys.exit(7)", cwd=isolated_home)
    assert g.wait(30) == 7
    g = Gpudoc("run", "--no-check", "--", "python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
               cwd=isolated_home)
    assert g.wait(30) == 128 + signal.SIGSEGV
    record = last_record(isolated_home)
    assert record["signal"] == signal.SIGSEGV and record["exit_code"] == 139
