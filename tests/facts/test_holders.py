"""Classification of real processes: leftovers of a recorded gpudoc run, live jobs, other users."""

import os
import subprocess

import psutil

from gpudoc.facts.holders import classify_gpu_processes
from tests.procs._spawn import ONE_GIB, gpu_facts, record_run, spawn, stop


def test_a_finished_runs_process_is_an_orphan_of_that_run(store):
    proc = spawn("sleep", "300")
    try:
        record = record_run(store, [proc], pgid=proc.pid)
        [holder] = classify_gpu_processes(gpu_facts({proc.pid: ONE_GIB}, store))
        assert holder.kind == "orphan_of_run" and holder.run_id == record.id
        assert holder.remedy() == "gpudoc clean --gpus 0"
    finally:
        stop(proc)


def test_a_running_runs_process_is_a_live_job(store):
    proc = spawn("sleep", "300")
    try:
        record = record_run(store, [proc], status="running", pgid=proc.pid)
        [holder] = classify_gpu_processes(gpu_facts({proc.pid: ONE_GIB}, store))
        assert holder.kind == "own_live_job" and holder.run_id == record.id
    finally:
        stop(proc)


def test_a_recorded_pid_with_another_create_time_is_not_the_runs(store):
    # PID reuse: the record names this PID, but the process there now started at another time,
    # and its process group is not the run's.
    proc = spawn("sleep", "300")
    try:
        real = psutil.Process(proc.pid).create_time()
        record_run(store, [proc], pgid=None, create_times={proc.pid: real - 3600})
        [holder] = classify_gpu_processes(gpu_facts({proc.pid: ONE_GIB}, store))
        assert holder.kind == "own_live_job" and holder.run_id is None
    finally:
        stop(proc)


def test_another_users_process_is_other_user():
    if os.getuid() == 0:
        proc = spawn("sleep", "300", user=65534)
        pid, owner = proc.pid, 65534
    else:
        proc, pid, owner = None, 1, psutil.Process(1).uids().real
    try:
        [holder] = classify_gpu_processes(gpu_facts({pid: ONE_GIB}))
        assert holder.kind == "other_user" and holder.uid == owner
        assert holder.remedy().startswith(f"ask {holder.user} to stop PID {pid}")
    finally:
        if proc:
            stop(proc)


def test_a_vanished_pid_is_invisible():
    proc = spawn("sleep", "300")
    pid = proc.pid
    stop(proc)
    [holder] = classify_gpu_processes(gpu_facts({pid: ONE_GIB}))
    assert holder.kind == "invisible"


def test_a_zombie_is_a_zombie():
    proc = spawn("sleep", "300")
    try:
        os.kill(proc.pid, 9)
        psutil.Process(proc.pid)  # still there: not reaped yet
        import time

        deadline = time.monotonic() + 5
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        [holder] = classify_gpu_processes(gpu_facts({proc.pid: ONE_GIB}))
        assert holder.kind == "zombie"
        assert holder.remedy() == f"kill -TERM {os.getpid()}  # the parent that has not reaped it"
    finally:
        stop(proc)


def test_a_snapshot_process_keeps_the_name_the_driver_reported():
    from gpudoc.facts.smi_files import load_snapshot
    from tests.conftest import NVIDIA_SMI

    facts = load_snapshot([NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"])
    holders = classify_gpu_processes(facts)
    # PID 100477 is llama-server on both GPUs of that capture; /proc cannot see another machine.
    assert {(h.gpu_index, h.pid, h.kind) for h in holders} == {(0, 100477, "unknown"), (1, 100477, "unknown")}
    assert all("llama-server" in h.name for h in holders)


def _orphan_in_a_new_group(leader_stays: bool) -> tuple[subprocess.Popen, int]:
    """A `sleep` whose parent (a subshell) has exited, in the process group of a shell that either
    stays (a live supervisor) or exits at once (a launcher that died)."""
    tail = "; exec sleep 300" if leader_stays else ""
    leader = subprocess.Popen(["sh", "-c", f"(sleep 300 >/dev/null 2>&1 & echo $!){tail}"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    orphan = int(leader.stdout.readline())
    if not leader_stays:
        leader.wait(timeout=5)
    return leader, orphan


def _as_orphans(facts):
    # Under pytest-xdist a worker that an earlier test made a child subreaper adopts the orphan, so
    # its parent looks alive: the group leader's state is what these tests are about.
    from dataclasses import replace

    return replace(facts, processes=tuple(replace(p, orphaned=True) for p in facts.processes))


def test_an_orphan_whose_group_leader_lives_is_signalled_alone():
    # Seen on a GPU machine: a stray left by a script that still runs got `kill -TERM -<group>`,
    # which would have ended the script too.
    leader, orphan = _orphan_in_a_new_group(leader_stays=True)
    try:
        [holder] = classify_gpu_processes(_as_orphans(gpu_facts({orphan: ONE_GIB})))
        assert holder.kind == "own_other" and holder.pgid == leader.pid != orphan
        assert holder.remedy() == f"gpudoc clean --gpus 0  # or: kill -TERM {orphan}"
    finally:
        os.kill(orphan, 9)
        stop(leader)


def test_an_orphan_whose_group_leader_is_gone_is_signalled_with_its_group():
    leader, orphan = _orphan_in_a_new_group(leader_stays=False)
    try:
        [holder] = classify_gpu_processes(_as_orphans(gpu_facts({orphan: ONE_GIB})))
        assert holder.kind == "own_other" and holder.process.group_leader_alive is False
        assert holder.remedy() == f"gpudoc clean --gpus 0  # or: kill -TERM -{leader.pid}"
    finally:
        os.kill(orphan, 9)
