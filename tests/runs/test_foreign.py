"""Records and fail-fast markers another user wrote into a shared runs directory are never trusted.

Giving a file another owner needs root (CI runs as root)."""

from __future__ import annotations

import json
import os
import time

import pytest

from gpudoc.launch.jobsync import JobSync
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RECORD, ForeignRecord, RunStore
from tests.conftest import gpudoc_cli

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a file another owner needs root (CI is root)")
NOBODY = 65534


@needs_root
def test_a_planted_record_never_becomes_the_latest_run(tmp_path):
    store = RunStore(tmp_path / "team")
    mine = RunRecord(id="20250101-000000-aaaaaa", command=["python", "train.py"], cwd=str(tmp_path), status="failed")
    store.create(mine)
    # Another user plants a record that sorts last (a far-future id) with their own command.
    planted = RunRecord(id="29991231-235959-ffffff", command=["sh", "-c", "steal"], cwd="/", status="failed")
    store.create(planted)
    os.chown(store.run_dir(planted.id) / RECORD, NOBODY, NOBODY)
    assert store.latest().id == mine.id
    assert [r.id for r in store.records()] == [mine.id]
    with pytest.raises(ForeignRecord, match="not written by you"):
        store.load(planted.id)
    done = gpudoc_cli("runs", env={"GPUDOC_HOME": str(tmp_path / "team")}, cwd=tmp_path)
    assert done.returncode == 0 and planted.id not in done.stdout and mine.id in done.stdout
    assert "ignored 1 run record(s)" in done.stderr and planted.id in done.stderr


def test_a_record_that_is_a_symlink_is_not_read(tmp_path):
    store = RunStore(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(RunRecord(id="x", command=["evil"], cwd="/").to_dict()))
    (store.root / "20250101-000000-bbbbbb").mkdir(parents=True)
    (store.root / "20250101-000000-bbbbbb" / RECORD).symlink_to(elsewhere)
    assert store.latest() is None and store.foreign == {"20250101-000000-bbbbbb"}


@needs_root
def test_a_marker_this_user_did_not_write_never_ends_the_job(tmp_path):
    sync = JobSync(tmp_path, "job-1", "run-b", "node-b")
    other = JobSync(tmp_path, "job-1", "run-a", "node-a")
    other.announce("gpu_oom", rank=0, line="CUDA out of memory")
    assert [d["run_id"] for d in sync.failures_elsewhere()] == ["run-a"]
    os.chown(sync.dir / "run-a.json", NOBODY, NOBODY)
    assert sync.failures_elsewhere() == []


def test_malformed_and_future_markers_are_ignored(tmp_path):
    sync = JobSync(tmp_path, "job-2", "run-b", "node-b")
    sync.dir.mkdir(parents=True)
    (sync.dir / "bad.json").write_text("[1, 2]")
    (sync.dir / "badtime.json").write_text(json.dumps({"run_id": "x", "time": "soon"}))
    (sync.dir / "future.json").write_text(json.dumps({"run_id": "y", "time": time.time() + 10 * 365 * 86400}))
    assert sync.failures_elsewhere() == []
    (sync.dir / "now.json").write_text(json.dumps({"run_id": "z", "time": time.time()}))
    assert [d["run_id"] for d in sync.failures_elsewhere()] == ["z"]
