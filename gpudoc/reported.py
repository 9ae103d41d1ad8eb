"""Figures a job reported about itself (the probe's files, the settings a framework resolved inside
the job): the job's to write, so each is believed only when it is what it claims to be."""

from __future__ import annotations

from typing import Any


def count(value: Any) -> int | None:
    """``value`` when it is a whole number of something (an int, not a bool, not negative); else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
