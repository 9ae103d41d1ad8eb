"""A rank torchrun hides from the console (`--local-ranks-filter`) fails in its own log file:
gpudoc reads torchrun's --log-dir files, names that rank's failure, and prints its log."""

from __future__ import annotations

import pytest

from tests.conftest import gpudoc_cli
from tests.launch.helpers import RANKS, Gpudoc, assert_no_leftovers, job_env, last_log, last_record, marker

pytestmark = pytest.mark.slow


def test_an_oom_only_in_a_hidden_ranks_file_is_the_cause(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "torchrun", "--nproc_per_node=2", "--monitor-interval=0.1",
               "--local-ranks-filter", "0", "--tee", "3", "--log-dir", "logs", str(RANKS), "oom_exit", mark,
               cwd=isolated_home, env=job_env(JOB_LINES="3"))
    assert g.wait(120) != 0
    assert b"OutOfMemoryError" not in last_log(isolated_home)  # the console never showed it
    record = last_record(isolated_home)
    assert sorted(record["rank_logs"]) == ["0", "1"]
    assert record["cause"] == "gpu_oom" and record["diagnosis"]["rank"] == 1
    assert record["diagnosis"]["summary"].startswith("Rank 1 ran out of CUDA memory")
    assert "torchrun's log of that rank" in record["diagnosis"]["summary"]
    shown = gpudoc_cli("logs", "--rank", "1", cwd=isolated_home)
    assert shown.returncode == 0 and "OutOfMemoryError" in shown.stdout
    missing = gpudoc_cli("logs", "--rank", "7", cwd=isolated_home)
    assert missing.returncode == 2 and "ranks 0, 1" in missing.stderr
    assert_no_leftovers(mark)


def test_a_hidden_rank_without_a_log_dir_is_redirected_into_the_run_folder(isolated_home):
    # torchrun alone would send rank 1's output to /dev/null: only its exit code would be left.
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "torchrun", "--nproc_per_node=2", "--monitor-interval=0.1",
               "--local-ranks-filter", "0", str(RANKS), "oom_exit", mark,
               cwd=isolated_home, env=job_env(JOB_LINES="3"))
    assert g.wait(120) != 0
    console = last_log(isolated_home)
    assert b"rank0 line0002" in console and b"rank1 line" not in console  # rank 0's console as it was
    record = last_record(isolated_home)
    assert "--redirects" not in record["argv"]  # the record keeps the command as bound; a relaunch rewrites afresh
    assert sorted(record["rank_logs"]) == ["1"]  # rank 0 still writes to the console only
    assert all(f"/{record['id']}/ranks/" in path for path in record["rank_logs"]["1"])
    assert record["cause"] == "gpu_oom" and record["diagnosis"]["rank"] == 1
    assert record["diagnosis"]["summary"].startswith("Rank 1 ran out of CUDA memory")
    assert_no_leftovers(mark)
