"""Surgical JSON edits: only the value's characters change; new keys follow the file's layout."""

from __future__ import annotations

import json

import pytest

from gpudoc.bind.jsonedit import set_value
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
