"""Surgical JSON edits: only the value's characters change; new keys follow the file's layout."""

from __future__ import annotations

import json

import pytest

from gpudoc.edits.jsonedit import set_value
from gpudoc.errors import InputError


def test_replace_keeps_every_other_byte():
    text = '{\n    "a": 5e8,\n    "b": {"c": 1.000000e+09, "d": "auto"}\n}'
    out = set_value(text, ("b", "d"), 4)
    assert out == '{\n    "a": 5e8,\n    "b": {"c": 1.000000e+09, "d": 4}\n}'


def test_new_key_goes_first_with_the_siblings_indent_and_separator():
    text = '{\n\t"x":1,\n\t"y":2\n}\n'
    out = set_value(text, ("z",), True)
    assert out == '{\n\t"z":true,\n\t"x":1,\n\t"y":2\n}\n'
    assert json.loads(out) == {"z": True, "x": 1, "y": 2}


def test_missing_intermediate_objects_are_created_in_the_files_style():
    text = '{\n  "zero_optimization": {\n    "stage": 2\n  }\n}'
    out = set_value(text, ("zero_optimization", "offload_param", "device"), "cpu")
    assert out == ('{\n  "zero_optimization": {\n    "offload_param": {\n      "device": "cpu"\n    },\n'
                   '    "stage": 2\n  }\n}')


def test_inline_and_empty_objects():
    assert set_value('{"a": {"b": 1}}', ("a", "c"), 2) == '{"a": {"c": 2, "b": 1}}'
    assert json.loads(set_value('{\n  "a": {}\n}', ("a", "c"), 2)) == {"a": {"c": 2}}


def test_unicode_and_escaped_keys_are_located_exactly():
    text = '{"na\\u00efve": "x", "k\\"ey": 1, "v": "caf\u00e9"}'
    out = set_value(text, ('k"ey',), 7)
    assert json.loads(out) == {"na\u00efve": "x", 'k"ey': 7, "v": "caf\u00e9"}
    assert out.startswith('{"na\\u00efve": "x", ')


def test_invalid_json_names_the_file_and_line():
    with pytest.raises(InputError, match=r"ds.json: line 2"):
        set_value('{\n  "a": ,\n}', ("a",), 1, name="ds.json")


def test_cannot_create_inside_a_scalar():
    with pytest.raises(InputError, match="not an object"):
        set_value('{"a": 1}', ("a", "b"), 1)


def test_a_key_written_twice_is_refused_naming_both_lines():
    text = '{\n  "train_micro_batch_size_per_gpu": 2,\n  "zero_optimization": {"stage": 2},\n' \
           '  "train_micro_batch_size_per_gpu": 8\n}\n'
    with pytest.raises(InputError) as err:
        set_value(text, ("train_micro_batch_size_per_gpu",), 4, name="ds.json")
    assert str(err.value) == ("ds.json: 'train_micro_batch_size_per_gpu' appears twice (lines 2 and 4); readers "
                              "disagree on which counts (most keep the last, some refuse the file): remove the others, "
                              "then run gpudoc again")
    assert (err.value.file, err.value.key) == ("ds.json", "train_micro_batch_size_per_gpu")
    with pytest.raises(InputError, match=r"'zero_optimization' appears 3 times \(lines 1, 1 and 1\)"):
        set_value('{"zero_optimization": {}, "zero_optimization": {}, "zero_optimization": {"stage": 1}}',
                  ("zero_optimization", "stage"), 2, name="ds.json")
    # A key written twice elsewhere is not this edit's business.
    assert set_value('{"a": 1, "b": 2, "b": 3}', ("a",), 5) == '{"a": 5, "b": 2, "b": 3}'

