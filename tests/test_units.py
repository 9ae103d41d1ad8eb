"""Sizes and durations as people read them."""

from __future__ import annotations

import pytest

from gpudoc.units import format_bytes, format_duration, parse_size


@pytest.mark.parametrize("text, expected", [
    ("2.26 GiB", 2426656522),
    ("781.59 MiB", 819556515),
    ("0 bytes", 0),
    ("20.00 MiB", 20 * 1024**2),
    ("1.5GB", int(1.5 * 1024**3)),  # messages print base-1024 sizes with GB too
    ("N/A", None),
    ("GiB", None),
])
def test_parse_size_base_1024(text, expected):
    assert parse_size(text) == expected


def test_parse_size_si_when_asked():
    assert parse_size("4490 MB", si=True) == 4_490_000_000


@pytest.mark.parametrize("n, expected", [
    (None, "N/A"), (512, "512 B"), (1536, "1.5 KiB"), (22.5 * 1024**3, "22.5 GiB"), (-2 * 1024**2, "-2.0 MiB"),
])
def test_format_bytes(n, expected):
    assert format_bytes(n) == expected


@pytest.mark.parametrize("seconds, expected", [
    (None, "-"), (5.83, "5.8 s"), (725, "12m05s"), (3 * 3600 + 7 * 60 + 12, "3h07m12s"),
])
def test_format_duration(seconds, expected):
    assert format_duration(seconds) == expected
