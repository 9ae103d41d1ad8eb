"""Values as files, command lines and the environment spell them: one reading, one writing."""

from __future__ import annotations

import pytest

from gpudoc.configvalues import MISSING, as_bool_text, count, format_value, get, is_auto, num, placeholder


def test_a_key_path_reaches_into_mappings_and_lists_and_says_missing_otherwise():
    data = {"a": {"b": [10, {"c": 3}]}}
    assert get(data, ("a", "b", "1", "c")) == 3
    assert get(data, ("a", "b", "0")) == 10
    assert get(data, ("a", "b", "2")) is MISSING
    assert get(data, ("a", "x")) is MISSING
    assert get(data, ("a", "b", "0", "deeper")) is MISSING


@pytest.mark.parametrize("value, expected", [
    (8, 8), (8.0, 8), ("8", 8), (" 8 ", 8), (None, None), (MISSING, None), ("auto", None), ("AUTO ", None),
    ("${bs}", None), ("???", None), ("eight", "eight"), (8.5, 8.5), (True, True),
])
def test_a_count_is_the_number_a_file_means_or_what_it_wrote(value, expected):
    got = count(value)
    assert got == expected and type(got) is type(expected)


def test_placeholders_and_numbers():
    assert placeholder("auto") and placeholder("${x}") and placeholder("???") and is_auto(" Auto")
    assert not placeholder("8") and not placeholder(None)
    assert num(True) is None and num(MISSING) is None and num(4.0) == 4 and num(4.5) is None and num("4") is None


@pytest.mark.parametrize("value, text", [(True, "true"), (False, "false"), (4, "4"), (1e16, "1e+16"), (3.0, "3.0"),
                                         ("bf16", "bf16")])
def test_a_value_is_written_as_the_environment_and_placeholders_take_it(value, text):
    assert format_value(value) == text


@pytest.mark.parametrize("text, expected", [("True", True), (" yes", True), ("on", True), ("1", True),
                                            ("false", False), ("N", False), ("0", False), ("2", None), ("", None)])
def test_a_boolean_is_read_in_each_spelling_the_frameworks_accept(text, expected):
    assert as_bool_text(text) is expected
