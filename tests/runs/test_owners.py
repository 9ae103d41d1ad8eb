"""Which earlier gpudoc run a process belongs to: by (pid, start time), or by process group while the run ran."""

from __future__ import annotations

from gpudoc.runs.owners import RunOwners
from gpudoc.runs.record import RunRecord


def _run(run_id, *, pids=(), group=None, status="failed", started="2024-01-01T10:00:00+0000",
         ended="2024-01-01T11:00:00+0000"):
    return RunRecord(id=run_id, command=["torchrun"], cwd="/", status=status, process_group=group, started_at=started,
                     ended_at=ended if status != "running" else None,
                     pids=[{"pid": p, "create_time": t} for p, t in pids])


START = 1_704_103_200.0  # 2024-01-01T10:00:00Z


def test_a_recorded_pid_with_the_same_start_time_belongs_to_its_run():
    owners = RunOwners([_run("a", pids=[(100, START + 5)])])
    found = owners.owner(100, START + 5.01, None)
    assert found is not None and found.run_id == "a" and found.live is False
    # The same PID started at another time is another process (the PID was reused).
    assert owners.owner(100, START + 90, None) is None
    assert owners.owner(100, None, None) is None  # no start time: no proof


def test_the_newest_run_that_claims_a_pid_wins_and_liveness_comes_with_it():
    owners = RunOwners([_run("old", pids=[(100, START + 5)]),
                        _run("new", pids=[(100, START + 5)], status="running")])
    found = owners.owner(100, START + 5, None)
    assert (found.run_id, found.live) == ("new", True)


def test_a_group_member_belongs_only_while_the_run_ran():
    owners = RunOwners([_run("a", group=4000)])
    assert owners.owner(4001, START + 60, 4000).run_id == "a"
    assert owners.owner(4001, START - 3600, 4000) is None  # older than the run: a reused group id
    assert owners.owner(4001, START + 7200, 4000) is None  # after the run ended
    assert owners.owner(4001, START + 60, 4999) is None


def test_ten_thousand_runs_are_indexed_once():
    records = [_run(f"r{i:05d}", pids=[(10_000 + i, START + i)]) for i in range(10_000)]
    owners = RunOwners(records)
    assert owners.owner(19_999, START + 9_999, None).run_id == "r09999"
    assert owners.owner(15_000, START + 1, None) is None
    assert len(owners._by_pid) == 10_000  # one entry per PID: a lookup is a dictionary access


def test_a_run_older_than_the_window_is_found_through_the_id_its_process_carries(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    import time

    from gpudoc.procs.identity import start_time
    from gpudoc.runs import store as store_module
    from gpudoc.runs.store import RunStore, new_run_id

    monkeypatch.setattr(store_module, "HISTORY_WINDOW", 2)
    store = RunStore(tmp_path)
    old_id = new_run_id()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env={**os.environ, "GPUDOC_RUN_ID": old_id})
    try:
        time.sleep(0.2)
        created = start_time(proc.pid)
        store.create(RunRecord(id=old_id, command=["python"], cwd="/", status="failed",
                               pids=[{"pid": proc.pid, "create_time": created}]))
        for _ in range(3):  # newer runs push it out of the window
            store.create(RunRecord(id=new_run_id(), command=["true"], cwd="/", status="ok"))
        assert old_id not in {r.id for r in store.records(newest=2)}
        found = store.owners().owner(proc.pid, created, None)
        assert found is not None and found.run_id == old_id
        # The id is a hint, not proof: a process it does not list is not the run's.
        assert store.owners().owner(proc.pid, created + 50, None) is None
    finally:
        proc.kill()
        proc.wait()
