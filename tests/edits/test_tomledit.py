"""TOML edits keep comments and the spelling of untouched values."""

from __future__ import annotations

import tomllib

from gpudoc.edits.tomledit import set_value


def test_toml_edit_keeps_comments_and_floats():
    text = "# cfg\n[train]\nbatch = 8   # per device\nlr = 5e-4\n[deep.er]\nx = 'y'\n"
    out = set_value(set_value(text, ("train", "batch"), 2), ("deep", "er", "x"), "z")
    assert out == "# cfg\n[train]\nbatch = 2   # per device\nlr = 5e-4\n[deep.er]\nx = 'z'\n" or \
        out == "# cfg\n[train]\nbatch = 2   # per device\nlr = 5e-4\n[deep.er]\nx = \"z\"\n"
    assert tomllib.loads(out)["deep"]["er"]["x"] == "z"


def test_toml_missing_key_and_table_are_created():
    out = set_value("[a]\nb = 1\n", ("a", "c"), True)
    assert tomllib.loads(out) == {"a": {"b": 1, "c": True}}
    out = set_value("[a]\nb = 1\n", ("n", "m"), 3)
    assert tomllib.loads(out) == {"a": {"b": 1}, "n": {"m": 3}}
    assert out.startswith("[a]\nb = 1\n")
