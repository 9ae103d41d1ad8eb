"""Causes before consequences under real torchrun (gloo, CPU): the failing rank's own error line,
then torchrun's Root Cause entry, and the SIGTERMs of its teardown never."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from gpudoc.diagnose.lines import iter_lines
from gpudoc.diagnose.text import diagnose_text
from gpudoc.diagnose.torchrun import first_failure, teardown_pids
from tests.conftest import VENV_BIN, shared_once

# Rank 1 fails as MODE says while rank 0 waits in a collective, so torchrun tears rank 0 down.
SCRIPT = textwrap.dedent("""
    import argparse, os, sys
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 23.68 GiB of which "
           "1.06 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use.")

    @record  # torchrun's report then carries the rank's traceback
    def main():
        rank = int(os.environ["RANK"])
        dist.init_process_group("gloo")
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float)
        if rank == 1:
            if sys.argv[1] == "argparse":
                parser.parse_args(sys.argv[2:])
            if sys.argv[1] == "oom":
                raise torch.OutOfMemoryError(OOM)
            sys.exit(3)  # "silent": no word of its own
        dist.barrier()

    main()
""")


def _torchrun(tmp_path: Path, *args: str, launcher: tuple[str, ...] = ()) -> subprocess.Popen:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    return subprocess.Popen([f"{VENV_BIN}/torchrun", "--nproc_per_node=2", "--monitor-interval=0.1", *launcher,
                             str(script), *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def logs(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Each mode's torchrun status and log, run once per session (tests/conftest.py shared_once)."""
    def make(where: Path) -> None:
        # The jobs at once: torchrun's start-up is most of the time.
        jobs = {mode: _torchrun(_mkdir(where / mode), mode, "--lr", "1", "--x", "3") for mode in ("argparse", "silent")}
        # Rank 1 hidden from the console: its OOM reaches it only inside torchrun's ChildFailedError report.
        jobs["oom"] = _torchrun(_mkdir(where / "oom"), "oom", launcher=("--local-ranks-filter", "0"))
        found = {mode: (proc.wait(180), proc.communicate()[0]) for mode, proc in jobs.items()}
        (where / "logs.json").write_text(json.dumps(found))

    found = json.loads((shared_once(tmp_path_factory, "torchrun-rank-failures", make) / "logs.json").read_text())
    return {mode: (status, log) for mode, (status, log) in found.items()}


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.slow
def test_a_ranks_argparse_failure_is_its_error_not_rank_0s_sigterm(logs):
    status, log = logs["argparse"]
    assert status != 0 and "closing signal SIGTERM" in log and "Root Cause" in log
    d = diagnose_text(log, exit_code=status)
    assert (d.cause, d.rank, d.signal) == ("error", 1, None)
    assert d.summary.startswith("Rank 1 on ") and "refused its command line" in d.summary
    assert "unrecognized arguments: --x 3" in d.summary
    assert "SIGTERM" not in d.summary


@pytest.mark.slow
def test_a_silent_rank_is_named_by_torchruns_root_cause(logs):
    status, log = logs["silent"]
    lines = iter_lines(log)
    first = first_failure(lines)
    assert first is not None and (first.rank, first.exit_code) == (1, 3)
    assert teardown_pids(lines)  # rank 0 was sent SIGTERM ...
    d = diagnose_text(log, exit_code=status)
    assert (d.cause, d.rank, d.inferred) == ("error", 1, True)  # ... and it is not the cause
    assert "Rank 1 on " in d.summary and "exited with status 3, torchrun's first observed failure" in d.summary
    assert "stopped the other workers with SIGTERM" in d.summary


@pytest.mark.slow
def test_an_oom_carried_only_inside_the_childfailederror_report_is_the_oom(logs):
    status, log = logs["oom"]
    assert "ChildFailedError" in log and "[rank1]" not in log  # the rank's own output never reached the console
    d = diagnose_text(log, exit_code=status)
    assert (d.cause, d.rank, d.requested_bytes, d.gpu_index) == ("gpu_oom", 1, 2 * 1024**3, 1)
    assert d.summary.startswith("Rank 1 on ")


def test_the_agents_own_line_stands_in_for_a_cut_report():
    log = ("W1127 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 11 closing signal SIGTERM\n"
           "E1127 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 1 (pid: 12) "
           "of binary: /usr/bin/python\n")
    d = diagnose_text(log, exit_code=1)
    assert (d.cause, d.rank, d.pid) == ("error", 1, 12)
    assert d.summary.startswith("Local rank 1 exited with status 2 (how argparse refuses a command line)")


def test_an_outside_stop_passed_on_is_no_teardown():
    lines = iter_lines("Received 15 death signal, shutting down workers\n"
                       "Sending process 11 closing signal SIGTERM\n")
    assert teardown_pids(lines) == []


def test_the_ranks_own_error_line_comes_before_the_root_cause():
    log = ("[rank1]: RuntimeError: boom from rank 1\n"
           "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
           "  exitcode  : 1 (pid: 5)\n")
    d = diagnose_text(log)
    assert d.summary == "Rank 1 failed: RuntimeError: boom from rank 1."


def test_a_sigterm_that_won_torchruns_race_for_root_cause_is_not_the_first_failure():
    # Recorded from the argparse job above: with @record, rank 0 (torn down by SIGTERM, its error file
    # written) was torchrun's "Root Cause", while the report's other entry is rank 1's exit 2.
    log = (Path(__file__).parent / "logs" / "torchrun_record_argparse_sigterm_root_cause.log").read_text()
    assert "exitcode  : -15 (pid: 12864)  (SIGTERM)" in log.split("Root Cause", 1)[1]
    first = first_failure(iter_lines(log))
    assert first is not None and (first.rank, first.exit_code) == (1, 2)
    d = diagnose_text(log, exit_code=1)
    assert d.rank == 1 and d.summary.startswith("Rank 1 on localhost refused its command line")


def test_a_workers_own_failure_line_comes_before_the_teardown_alone():
    teardown = "Sending process 4243 closing signal SIGTERM\nSending process 4244 closing signal SIGTERM\n"
    alone = diagnose_text(teardown, exit_code=1)
    assert alone.cause == "error" and "(pids 4243, 4244), its teardown: a consequence" in alone.summary
    own = diagnose_text("FATAL: data shard 7 unreadable\n" + teardown, exit_code=1)
    assert own.evidence == "FATAL: data shard 7 unreadable" and "teardown" not in own.summary
