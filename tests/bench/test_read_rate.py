"""bench/read_rate.py's collections of real commands (the seen one and the held-out one) stay runnable:
every entry names fixture files that exist, a framework gpudoc knows and knobs of the profile's
vocabulary; one entry read end to end through the harness."""

from __future__ import annotations

import sys

import pytest

from gpudoc.frameworks import registry
from gpudoc.profiles.schema import TABLES
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import read_rate  # a script beside the others, not a package

ENTRIES = [entry for name in read_rate.COLLECTIONS for entry in read_rate.load(name)]


def test_ids_are_unique_over_both_collections():
    assert len({e["id"] for e in ENTRIES}) == len(ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["id"])
def test_every_entry_is_whole(entry):
    assert all(read_rate.fixture(source).exists() for source in entry["files"].values())
    assert registry.get(entry["framework"]) is not None
    assert set(entry["truth"]) <= set(TABLES["train"])  # the knobs a profile names
    assert len(entry["source"]) > 20 and entry["command"]


def test_an_entry_is_read_through_the_users_path(tmp_path):
    [entry] = [e for e in ENTRIES if e["id"] == "deepspeed-megatron-zero3"]
    read = read_rate.read_values(entry, tmp_path)
    assert {knob: read.get(knob) for knob in entry["truth"]} == entry["truth"]
