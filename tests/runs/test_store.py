"""Run records: atomic, ordered, found by prefix, the runs directory kept out of git."""

from __future__ import annotations

import json

import pytest

from gpudoc.errors import InputError
from gpudoc.runs.store import RECORD, RunRecord, RunStore, new_run_id


def make(store: RunStore, **fields) -> RunRecord:
    record = RunRecord(id=new_run_id(), command=["python", "train.py"], cwd="/x", **fields)
    store.create(record)
    return record


def test_ids_sort_in_creation_order_even_within_one_second(tmp_path):
    store = RunStore(tmp_path)
    made = [make(store).id for _ in range(20)]
    assert store.ids() == made
    assert store.latest().id == made[-1]


def test_create_writes_a_gitignore_and_json_with_the_spec_keys(tmp_path):
    store = RunStore(tmp_path)
    record = make(store, parent="abc", job_id="slurm-42")
    assert (tmp_path / ".gitignore").read_text().strip().endswith("*")
    data = json.loads((store.run_dir(record.id) / RECORD).read_text())
    for key in ("id", "command", "cwd", "profile", "env_set", "file_edits", "started_at", "ended_at",
                "exit_code", "signal", "cause", "diagnosis", "peak_memory_bytes", "gpus", "parent",
                "host", "job_id", "gpudoc_version"):
        assert key in data
    assert data["parent"] == "abc" and data["job_id"] == "slurm-42"


def test_load_by_unique_prefix_and_errors_name_the_problem(tmp_path):
    store = RunStore(tmp_path)
    record = make(store)
    assert store.load(record.id[:-2]).id == record.id
    with pytest.raises(InputError, match="no run 'nope'"):
        store.load("nope")
    make(store)
    with pytest.raises(InputError, match="ambiguous"):
        store.load(record.id[:4])


def test_a_corrupt_record_is_one_clear_error_and_skipped_when_listing(tmp_path):
    store = RunStore(tmp_path)
    good = make(store)
    bad = make(store)
    (store.run_dir(bad.id) / RECORD).write_text("{not json")
    with pytest.raises(InputError, match="unreadable run record"):
        store.load(bad.id)
    assert [r.id for r in store.records()] == [good.id]


def test_gpudoc_home_overrides_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOC_HOME", str(tmp_path / "shared"))
    assert RunStore().root == tmp_path / "shared" / "runs"


def test_unknown_keys_from_newer_versions_are_ignored(tmp_path):
    data = RunRecord(id="x", command=[], cwd="/").to_dict() | {"from_the_future": 1}
    assert RunRecord.from_dict(data).id == "x"


def _stamp(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def test_job_records_gather_one_attempt_of_a_job_across_nodes(tmp_path):
    import time

    store = RunStore(tmp_path)
    t = time.time() - 3600
    # An earlier attempt that reused the id (a fixed --rdzv-id): both of its nodes ended long ago.
    old = [make(store, job_id="rdzv-x", host=h, started_at=_stamp(t), ended_at=_stamp(t + 60)) for h in "ab"]
    make(store, job_id="rdzv-other", host="a", started_at=_stamp(t + 600), ended_at=_stamp(t + 700))
    # This attempt: node b started 3 s after node a (rendezvous), a is still writing.
    now_a = make(store, job_id="rdzv-x", host="a", node_rank=0, started_at=_stamp(t + 600))
    now_b = make(store, job_id="rdzv-x", host="b", node_rank=1, started_at=_stamp(t + 603),
                 ended_at=_stamp(t + 650))
    store.log_path(now_a.id).write_text("still going\n")
    assert [r.id for r in store.job_records("rdzv-x")] == [*(r.id for r in old), now_a.id, now_b.id]
    assert [r.id for r in store.job_records("rdzv-x", attempt_of=now_b)] == [now_a.id, now_b.id]
    assert [r.id for r in store.job_records("rdzv-x", attempt_of=old[1])] == [r.id for r in old]
    loaded = store.load(now_b.id)
    assert loaded.node_rank == 1


def test_job_records_leave_out_an_attempt_that_ended_just_before_this_one(tmp_path):
    import time

    store = RunStore(tmp_path)
    t = time.time() - 3600
    # Within the clock allowance, but the same node cannot run two parts of one attempt in turn;
    # and a --retry-oom parent is an earlier attempt however close in time.
    before = make(store, job_id="slurm-9", host="a", started_at=_stamp(t), ended_at=_stamp(t + 10))
    failed = make(store, job_id="slurm-9", host="b", started_at=_stamp(t + 12), ended_at=_stamp(t + 14))
    retried = make(store, job_id="slurm-9", host="b", parent=failed.id, started_at=_stamp(t + 14))
    latest = make(store, job_id="slurm-9", host="a", started_at=_stamp(t + 13))
    store.log_path(latest.id).write_text("x\n")
    store.log_path(retried.id).write_text("x\n")
    assert [r.id for r in store.job_records("slurm-9", attempt_of=latest)] == [retried.id, latest.id]
    assert before.id not in [r.id for r in store.job_records("slurm-9", attempt_of=latest)]
