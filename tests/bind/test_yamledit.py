"""YAML edits change the scalar's characters only: quotes, bool spelling, comments survive."""

from __future__ import annotations

import pytest

from gpudoc.bind.yamledit import set_value
from gpudoc.errors import InputError


def test_quotes_comments_and_bool_capitalisation_are_kept():
    text = "a: 'fp16'  # keep\nb: \"x\"\nc: True # c\nd: ${oc.env:X}\ne: ???\n"
    out = set_value(set_value(set_value(text, ("a",), "bf16"), ("b",), "y"), ("c",), False)
    assert out == "a: 'bf16'  # keep\nb: \"y\"\nc: False # c\nd: ${oc.env:X}\ne: ???\n"


def test_empty_value_gets_a_value_after_the_colon():
    assert set_value("lora_r:\nx: 1\n", ("lora_r",), 8) == "lora_r: 8\nx: 1\n"
    assert set_value("a:  # note\nb: 1\n", ("a",), 3) == "a: 3  # note\nb: 1\n"


def test_new_key_goes_after_the_mappings_last_block_and_before_trailing_comments():
    text = "top: 1\nsect:\n  k: 1\n  sub:\n    - x\n    - y\n\n# tail comment\n"
    out = set_value(text, ("sect", "new"), "v")
    assert out == "top: 1\nsect:\n  k: 1\n  sub:\n    - x\n    - y\n  new: v\n\n# tail comment\n"


def test_missing_final_newline_stays_missing():
    assert set_value("a: 1\nb: 2", ("c",), 3) == "a: 1\nb: 2\nc: 3"
    assert set_value("a: 1\nb: 2", ("b",), 5) == "a: 1\nb: 5"


def test_nested_create_uses_the_files_indent_step():
    out = set_value("a:\n    b: 1\n", ("c", "d"), True)
    assert out == "a:\n    b: 1\nc:\n    d: true\n"


def test_strings_that_would_change_type_are_quoted():
    assert set_value("a: x\n", ("a",), "true") == 'a: "true"\n'
    assert set_value("a: x\n", ("a",), "1e5") == 'a: "1e5"\n'
    assert set_value("a: x\n", ("a",), "bf16-mixed") == "a: bf16-mixed\n"


def test_flow_and_block_values_are_refused_not_mangled():
    with pytest.raises(InputError, match="not a one-line value"):
        set_value("a: |\n  text\n", ("a",), "x")
    with pytest.raises(InputError, match="holds a"):
        set_value("a:\n  b: 1\n", ("a",), 1)
