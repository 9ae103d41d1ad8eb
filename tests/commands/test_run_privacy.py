"""A run's records are private to its user unless the profile shares them; duration settings that
are not a finite number of seconds never switch off the SIGKILL escalation."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

from gpudoc.launch.watch import GpuSampler
from gpudoc.runs.store import RunStore
from tests.conftest import REPO, gpudoc_cli


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _only_run_dir(home):
    [run_dir] = [d for d in (home / ".gpudoc" / "runs").iterdir() if d.is_dir()]
    return run_dir


def test_a_runs_directory_and_files_are_private_by_default(isolated_home):
    old = os.umask(0o022)  # the usual umask: without care, files would be world-readable
    try:
        done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "print('secret output')",
                          cwd=isolated_home)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    run_dir = _only_run_dir(isolated_home)
    assert _mode(run_dir) == 0o700
    assert _mode(run_dir / "run.json") == 0o600 and _mode(run_dir / "output.log") == 0o600


def test_a_shared_profile_lets_the_group_read(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[run]\nshared = true\n")
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "print('team output')", cwd=isolated_home)
    assert done.returncode == 0, done.stderr
    run_dir = _only_run_dir(isolated_home)
    assert _mode(run_dir) == 0o750
    assert _mode(run_dir / "run.json") == 0o640 and _mode(run_dir / "output.log") == 0o640
    assert RunStore(isolated_home / ".gpudoc").file_mode(run_dir.name) == 0o640


def test_gpu_samples_are_written_private(tmp_path):
    class Gpu:
        index, uuid, name, memory_used_bytes, memory_total_bytes, utilization_gpu_percent = 0, "GPU-0", "T4", 1, 2, 3
        processes = ()

    sampler = GpuSampler(tmp_path / "gpu.csv", reader=lambda: (None, None, None, [Gpu()], None))
    assert sampler.sample()
    sampler.close()
    assert _mode(tmp_path / "gpu.csv") == 0o600


def test_a_nan_term_grace_still_ends_a_job_that_ignores_sigterm(isolated_home):
    # The job ignores SIGTERM; gpudoc gets SIGTERM. With the grace read as `nan`, SIGKILL never came.
    job = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "print('ready', flush=True); time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUDOC_TERM_GRACE_S": "nan"}
    proc = subprocess.Popen([sys.executable, "-m", "gpudoc", "run", "--no-check", "--", sys.executable, "-c", job],
                            cwd=isolated_home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(15)
    started = time.monotonic()
    _out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 20  # the default grace (10 s), not forever
    assert b"GPUDOC_TERM_GRACE_S = 'nan' is not a number of seconds" in err
    record = json.loads((_only_run_dir(isolated_home) / "run.json").read_text())
    assert record["status"] == "interrupted" and not record["survivors"]
