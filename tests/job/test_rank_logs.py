"""torchrun's per-rank log files: found from the command line, this run's only, newest attempt."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpudoc.job.argv import parse_command
from gpudoc.job.rank_logs import rank_log_dir, rank_logs


def test_the_log_dir_comes_from_torchruns_own_options(tmp_path):
    job = parse_command(["torchrun", "--nproc_per_node=2", "--log-dir", "logs", "--tee", "3", "train.py", "--log-dir", "x"])
    assert rank_log_dir(job, tmp_path) == tmp_path / "logs"  # not the script's own --log-dir
    assert rank_log_dir(parse_command(["torchrun", "--log_dir=/abs/d", "t.py"]), tmp_path) == Path("/abs/d")
    assert rank_log_dir(parse_command(["python", "train.py", "--log-dir", "logs"]), tmp_path) is None
    assert rank_log_dir(parse_command(["torchrun", "train.py"]), tmp_path) is None


def _make(root: Path, run: str, attempt: int, ranks: range, *, age_s: float = 0.0) -> Path:
    folder = root / run
    for rank in ranks:
        rank_dir = folder / f"attempt_{attempt}" / str(rank)
        rank_dir.mkdir(parents=True)
        (rank_dir / "stdout.log").write_text(f"out {rank}\n")
        (rank_dir / "stderr.log").write_text(f"err {rank}\n")
    stamp = time.time() - age_s
    os.utime(folder, (stamp, stamp))
    return folder


def test_only_this_runs_newest_attempt_counts(tmp_path):
    started = time.time()
    _make(tmp_path, "old-run_abc", 0, range(2), age_s=3600)  # an earlier job's logs in the same directory
    run = _make(tmp_path, "new-run_def", 0, range(2))
    _make(tmp_path, "new-run_def", 1, range(3))  # torchrun restarted the workers
    os.utime(run, None)
    found = rank_logs(tmp_path, since=started)
    assert sorted(found) == [0, 1, 2]
    assert found[2] == [run / "attempt_1" / "2" / "stdout.log", run / "attempt_1" / "2" / "stderr.log"]
    assert rank_logs(tmp_path, since=time.time() + 60) == {}
    assert rank_logs(tmp_path / "missing", since=started) == {}
