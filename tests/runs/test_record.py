"""``run.json`` read back: a record of the wrong shape is refused by name, never a crash later."""

from __future__ import annotations

import pytest

from gpudoc.runs.record import RecordError, RunRecord


def _doc(**changed):
    return RunRecord(id="20260101-000000000-aaaaaa", command=["python", "train.py"], cwd="/x").to_dict() | changed


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("started_at", 5, "str or null"),
    ("duration_s", "x", "float or null"),
    ("command", None, "list[str]"),
    ("command", ["python", 3], "list[str]"),
    ("exit_code", True, "int or null"),  # a JSON boolean is not an exit code
    ("peak_memory_bytes", {"0": "big"}, "dict[str, int]"),
    ("rank_logs", {"0": ["a.log", 1]}, "dict[str, list[str]]"),
    ("profile", [], "dict or null"),
    ("terminal_lost", "no", "bool"),
])
def test_a_key_of_the_wrong_type_is_refused_naming_the_key_and_what_it_holds(key, value, expected):
    with pytest.raises(RecordError) as raised:
        RunRecord.from_dict(_doc(**{key: value}))
    assert f"key '{key}' holds" in str(raised.value) and f"expected {expected}" in str(raised.value)
    assert raised.value.key == key


@pytest.mark.parametrize("doc", [[], "run", 3, None])
def test_a_record_that_is_not_a_json_object_is_refused(doc):
    with pytest.raises(RecordError, match="expected a JSON object"):
        RunRecord.from_dict(doc)


def test_a_missing_required_key_is_named():
    doc = _doc()
    del doc["cwd"]
    with pytest.raises(RecordError, match="missing key 'cwd'"):
        RunRecord.from_dict(doc)


def test_what_json_cannot_tell_apart_is_accepted_and_the_diagnosis_stays_tolerant():
    record = RunRecord.from_dict(_doc(duration_s=12, exit_code=None, diagnosis="gpu_oom", from_the_future=[1]))
    assert record.duration_s == 12 and record.diagnosis is None


def test_a_long_value_is_quoted_short():
    with pytest.raises(RecordError) as raised:
        RunRecord.from_dict(_doc(cwd=["x" * 500]))
    assert len(str(raised.value)) < 120


def test_launched_is_what_ran_argv_when_recorded():
    record = RunRecord.from_dict(_doc(argv=["python", "train.py", "--bs", "4"]))
    assert record.launched == ["python", "train.py", "--bs", "4"]
    assert RunRecord.from_dict(_doc()).launched == ["python", "train.py"]
