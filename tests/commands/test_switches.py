"""The plain switch parser: what it takes for certain, and everything it leaves to plumbum."""

from __future__ import annotations

import pytest

from gpudoc.commands.switches import defaults, parse_switches, takes_value

TABLE = (
    (("-p", "--profile"), "profile", "str", "NAME", "a value"),
    (("--json",), "json", None, "", "a flag"),
    (("--only",), "only", "list", "IDS", "a value that may repeat"),
    (("--retries",), "retries", "count", "N", "a whole number"),
)


def test_defaults_are_plumbums():
    assert defaults(TABLE) == {"profile": None, "json": False, "only": [], "retries": 0}
    assert takes_value(TABLE) == {"p": True, "profile": True, "json": False, "only": True, "retries": True}


@pytest.mark.parametrize(("args", "values", "rest"), [
    ([], {}, []),
    (["-p", "x", "--json"], {"profile": "x", "json": True}, []),
    (["-px"], {"profile": "x"}, []),
    (["--profile=x=y"], {"profile": "x=y"}, []),
    (["--only", "a", "--only=b,c"], {"only": ["a", "b,c"]}, []),
    (["--retries", "3", "--", "cmd", "--json"], {"retries": 3}, ["cmd", "--json"]),
    (["--profile", "-x"], {"profile": "-x"}, []),
])
def test_what_it_takes(args, values, rest):
    assert parse_switches(args, TABLE, max_count=5) == (values, rest)


@pytest.mark.parametrize("args", [
    ["cmd"], ["--bogus"], ["-h"], ["--json", "--json"], ["-p", "a", "--profile", "b"], ["--json=1"], ["-jx"],
    ["--profile"], ["--profile", "--"], ["--profile="], ["--profile", "=x"], ["--retries", "6"], ["--retries", "-1"],
    ["--retries", "two"],
])
def test_what_it_leaves_to_plumbum(args):
    assert parse_switches(args, TABLE, max_count=5) is None
