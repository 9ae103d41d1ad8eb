"""`gpudoc watch` follows a run from what the launcher writes; `run --watch` opens it in a tmux split."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoc.commands.watch import watch
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from gpudoc.units import format_bytes
from tests.cli.test_fuzz import EXAMPLES
from tests.conftest import REPO, captured_workspace, tmux_screen


def _running_run(home, *, status="running"):
    from gpudoc.facts.nvml import read_gpus
    from gpudoc.launch.watch import GpuSampler, nvml_reader
    from tests.facts.fake_nvml import FakeNvml
    from tests.launch.test_watch import DUAL_A5000

    backend = FakeNvml.from_snapshot(DUAL_A5000)
    holder = next(p for g in read_gpus(backend)[3] for p in (g.processes or ()))  # the capture's own process
    store = RunStore(home / ".gpudoc")
    record = RunRecord(id="20260101-000000000-cccccc", command=["torchrun", "train.py"], cwd=str(home),
                       status=status, launcher_pid=os.getpid(), started_at="2026-01-01T00:00:00+0000",
                       pids=[{"pid": holder.pid, "create_time": 1.0}, {"pid": 4242, "create_time": 1.0}],
                       profile={"ladder": {"target_utilization": 0.9}})
    store.create(record)
    (store.log_path(record.id)).write_text("step 1 loss 2.0\nstep 2 loss 1.9\n")
    clock = iter(float(t) for t in range(1000, 1040))
    sampler = GpuSampler(store.samples_path(record.id), reader=nvml_reader(backend), clock=lambda: next(clock),
                         job_pids=lambda: [holder.pid, 4242])
    for _ in range(40):
        sampler.sample()
    sampler.close()
    return store, record


def test_a_frame_shows_each_gpu_the_peak_against_target_the_processes_and_the_last_line(tmp_path):
    from gpudoc.facts.nvml import read_gpus
    from tests.facts.fake_nvml import FakeNvml
    from tests.launch.test_watch import DUAL_A5000

    store, record = _running_run(tmp_path)
    ws = captured_workspace(tmp_path, environ={"GPUDOC_HOME": str(store.home)})
    assert watch(ws, record.id, frames=1) == 0
    out = ws.console.out.getvalue()
    assert f"gpudoc watch: run {record.id}  running" in out
    gpu_lines = [line for line in out.splitlines() if line.strip().startswith("GPU ")]
    assert len(gpu_lines) == 2
    assert all("(target 90%)" in line and "util" in line for line in gpu_lines)
    assert "91%" in gpu_lines[0]  # 21.9 of 24.0 GiB, the real capture's first A5000
    # What each of the job's processes holds, summed over the GPUs (the capture's one process holds
    # memory on both A5000s); a process NVML does not list is named without a size.
    held = sum(p.used_memory_bytes or 0 for g in read_gpus(FakeNvml.from_snapshot(DUAL_A5000))[3]
               for p in (g.processes or ()) if p.pid == holder_pid(store, record))
    assert f"processes: {holder_pid(store, record)} ({format_bytes(held)}), 4242" in out
    assert "last line: step 2 loss 1.9" in out
    assert "\x1b[2J" not in out  # not a terminal: no screen clearing in a pipe


def holder_pid(store, record):
    return int(store.load(record.id).pids[0]["pid"])


def test_an_ended_run_gets_its_last_frame_and_the_summary(tmp_path):
    store, record = _running_run(tmp_path, status="failed")
    ws = captured_workspace(tmp_path, environ={"GPUDOC_HOME": str(store.home)})
    assert watch(ws, record.id) == 1
    assert f"run {record.id} ended: failed" in ws.console.out.getvalue()


def test_run_watch_inside_tmux_opens_the_follower_in_a_split(isolated_home, tmux_env):
    env = {**os.environ, **tmux_env, "PYTHONPATH": str(REPO)}
    inner = f"{sys.executable} -m gpudoc run --watch --no-check -- {sys.executable} -c 'import time; time.sleep(6)'"
    subprocess.run(["tmux", "new-session", "-d", "-s", "work", "-x", "160", "-y", "50", "-c", str(isolated_home),
                    inner], env=env, check=True)
    panes, deadline = [], time.monotonic() + 20
    while len(panes) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        panes = subprocess.run(["tmux", "list-panes", "-t", "=work:", "-F", "#{pane_id}"], env=env,
                               capture_output=True, text=True).stdout.split()
    assert len(panes) == 2, panes
    screen = tmux_screen(env, panes[1], until="gpudoc watch: run", timeout=10)
    assert "gpudoc watch: run" in screen and "running" in screen, screen


def test_watch_in_a_real_tmux_pane_follows_fake_nvml_samples_and_ends_with_the_run(isolated_home, tmux_env):
    from tests.conftest import VENV_BIN

    store, record = _running_run(isolated_home)
    env = {**os.environ, **tmux_env}
    command = f"{os.path.join(VENV_BIN, 'gpudoc')} watch {record.id}; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", "follow", "-x", "160", "-y", "30", "-c", str(isolated_home),
                    command], env=env, check=True)
    shown = tmux_screen(env, "=follow:", until="(target 90%)")
    assert shown.count("(target 90%)") == 2 and "▆" in shown, shown  # a frame of the real capture's two GPUs
    record.status, record.cause = "ok", "ok"
    store.save(record)  # the run ends: the follower says so and stops
    shown = tmux_screen(env, "=follow:", until=f"run {record.id} ended: ok", timeout=10)
    assert f"run {record.id} ended: ok" in shown, shown


def test_a_finished_run_is_shown_as_it_ended_without_live_processes(tmp_path):
    store, record = _running_run(tmp_path, status="failed")
    record.exit_code, record.duration_s = 1, 40.0
    store.save(record)
    ws = captured_workspace(tmp_path, environ={"GPUDOC_HOME": str(store.home)})
    assert watch(ws, record.id) == 1
    out = ws.console.out.getvalue()
    assert f"gpudoc watch: run {record.id}  finished: failed, exit 1, after 40" in out
    assert "processes:" not in out  # their PIDs are anybody's now
    assert len([line for line in out.splitlines() if line.strip().startswith("GPU ")]) == 2  # its recorded samples


def test_a_finished_run_without_samples_shows_its_recorded_peaks(tmp_path):
    store = RunStore(tmp_path / ".gpudoc")
    record = RunRecord(id="20260101-000000000-dddddd", command=["python", "train.py"], cwd=str(tmp_path),
                       status="ok", exit_code=0, duration_s=3.0, launcher_pid=2**22 + 4321,
                       pids=[{"pid": 2**22 + 4322, "create_time": 1.0}], peak_memory_bytes={"0": 12 * 2**30},
                       gpus=[{"index": 0, "name": "A10G", "total_bytes": 24 * 2**30}])
    store.create(record)
    ws = captured_workspace(tmp_path, environ={"GPUDOC_HOME": str(store.home)})
    assert watch(ws, record.id) == 0
    out = ws.console.out.getvalue()
    assert f"run {record.id}  finished: ok, exit 0" in out
    assert "GPU 0  peak 12.0 GiB of 24.0 GiB (50%)" in out
    assert "no GPU samples yet" not in out and str(2**22 + 4322) not in out


def test_random_bytes_appended_to_gpu_csv_are_skipped_and_counted(tmp_path):
    import random

    store, record = _running_run(tmp_path, status="failed")
    record.exit_code, record.duration_s = 1, 40.0
    store.save(record)
    with open(store.samples_path(record.id), "ab") as handle:
        handle.write(bytes(random.Random(3).randrange(256) for _ in range(3000)) + b"\0\n")
    ws = captured_workspace(tmp_path, environ={"GPUDOC_HOME": str(store.home)})
    assert watch(ws, record.id) == 1
    out = ws.console.out.getvalue()
    assert len([line for line in out.splitlines() if line.strip().startswith("GPU ")]) == 2
    assert "of gpu.csv skipped (not a sample)" in out


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=3000) | st.lists(st.sampled_from(
    ["1040,3,0,0,,", "nan,0,5,10,,", "1e400,1,5,10,,", "1041,0,-5,10,,", "1042,2,5,0,x,9", '"', ",,,,,", "\0"]),
    max_size=8).map(lambda rows: "\n".join(rows).encode()))
def test_any_bytes_appended_to_gpu_csv_make_a_frame_and_a_timeline(tmp_path, junk):
    from pathlib import Path

    from gpudoc.commands.watch import frame
    from gpudoc.launch.watch import HEADER
    from gpudoc.runs.samples import read_timeline

    samples = tmp_path / "gpu.csv"
    samples.write_bytes(HEADER.encode() + b"1000,0,100,1000,50,\n" + junk + b"\n")
    record = RunRecord(id="20260101-000000000-aaaaaa", command=["x"], cwd="/", status="ok", exit_code=0, duration_s=1.0)
    assert frame(record, "ok", samples, Path(tmp_path / "no.log"))[0].startswith("gpudoc watch: run ")
    assert read_timeline(samples).rows >= 1
