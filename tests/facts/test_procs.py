"""process_facts against real processes: a sleeping child, a zombie, an orphan, a vanished PID."""

from __future__ import annotations

import getpass
import os
import subprocess
import time

import psutil
import pytest

from gpudoc.facts.procs import process_facts
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.runs.store import RunStore, new_run_id


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_live_child_process(sleeper):
    (info,) = process_facts([sleeper.pid])
    assert info.visible is True
    assert info.name == "sleep"
    assert info.cmdline == ("sleep", "30")
    assert info.ppid == os.getpid()
    assert info.pgid == sleeper.pid  # start_new_session: its own group
    assert info.uid == os.getuid()
    assert info.user == getpass.getuser()
    assert info.status in ("sleeping", "running")
    assert info.zombie is False and info.orphaned is False
    assert abs(info.create_time - time.time()) < 60
    assert info.gpudoc_run_id is None


def test_zombie_is_visible_and_flagged():
    proc = subprocess.Popen(["true"])
    try:
        assert _wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE)
        (info,) = process_facts([proc.pid])
        assert info.visible is True
        assert info.zombie is True
        assert info.status == "zombie"
        assert info.ppid == os.getpid()
        assert info.orphaned is False
    finally:
        proc.wait()


def test_vanished_pid_is_not_visible():
    proc = subprocess.Popen(["true"])
    proc.wait()
    (info,) = process_facts([proc.pid])
    assert info.visible is False
    assert info.user is None and info.cmdline == ()


def test_pid_outside_this_namespace_is_not_visible():
    # PIDs above pid_max cannot exist here, like a host PID seen from inside a container.
    (info,) = process_facts([4_194_305])
    assert info.visible is False


def test_orphan_whose_launcher_exited():
    out = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                         check=True)
    pid = int(out.stdout)
    try:
        (info,) = process_facts([pid])
        assert info.visible is True
        assert info.ppid != os.getpid()
        assert info.orphaned is True  # re-parented to init (or its launcher is gone)
    finally:
        psutil.Process(pid).kill()


def test_duplicate_pids_are_reported_once(sleeper):
    infos = process_facts([sleeper.pid, sleeper.pid, 4_194_305])
    assert [i.pid for i in infos] == [sleeper.pid, 4_194_305]


def _store_with(tmp_path, **fields) -> tuple[RunStore, str]:
    store = RunStore(tmp_path / "gd")
    run_id = new_run_id()
    store.create(RunRecord(id=run_id, command=["python", "train.py"], cwd=str(tmp_path), started_at=now_iso(),
                           **fields))
    return store, run_id


def test_process_group_of_an_earlier_run_is_recognised(tmp_path):
    # started_at has one-second resolution: start the run record first, then the process.
    store, run_id = _store_with(tmp_path, process_group=None)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        record = store.load(run_id)
        record.process_group = proc.pid
        store.save(record)
        (info,) = process_facts([proc.pid], owners=store.owners())
        assert info.gpudoc_run_id == run_id
        (without,) = process_facts([proc.pid])
        assert without.gpudoc_run_id is None
    finally:
        proc.kill()
        proc.wait()


def test_pid_and_create_time_of_an_earlier_run_are_recognised(tmp_path, sleeper):
    created = psutil.Process(sleeper.pid).create_time()
    store, run_id = _store_with(tmp_path, pids=[{"pid": sleeper.pid, "create_time": created}])
    (info,) = process_facts([sleeper.pid], owners=store.owners())
    assert info.gpudoc_run_id == run_id


def test_reused_pid_with_another_create_time_is_not_claimed(tmp_path, sleeper):
    created = psutil.Process(sleeper.pid).create_time()
    store, _ = _store_with(tmp_path, pids=[{"pid": sleeper.pid, "create_time": created - 3600}])
    (info,) = process_facts([sleeper.pid], owners=store.owners())
    assert info.gpudoc_run_id is None


def test_group_of_a_run_that_started_after_the_process_is_not_claimed(tmp_path, sleeper):
    # started_at has one-second resolution; the process must predate the run by more than the slack.
    time.sleep(2.1)
    store, _ = _store_with(tmp_path, process_group=sleeper.pid)
    (info,) = process_facts([sleeper.pid], owners=store.owners())
    assert info.gpudoc_run_id is None  # a reused group id, not this run's process
