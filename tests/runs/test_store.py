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
