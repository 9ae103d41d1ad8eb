"""The slowest tests first, so pytest-xdist's workers finish together instead of one of them
starting a two-minute test when the rest of the suite is done (longest first is the classic
schedule for this). ``tests/slowest.txt`` lists them, slowest first; every other test keeps its
place after them. Refresh the list after a change in what is slow:

    GPUDOC_RECORD_DURATIONS=tests/slowest.txt ./bin/test
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

SLOWEST = Path(__file__).with_name("slowest.txt")
KEPT = 150  # the tests worth placing: below a few seconds, order no longer changes the finish
_durations: dict[str, float] = defaultdict(float)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:
        listed = [line for line in SLOWEST.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return
    rank = {node: i for i, node in enumerate(listed)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))  # stable: the rest keep their order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("GPUDOC_RECORD_DURATIONS"):
        _durations[report.nodeid] += report.duration  # set-up (a shared job's first reader), call, teardown


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("GPUDOC_RECORD_DURATIONS")
    if not target or os.environ.get("PYTEST_XDIST_WORKER") or not _durations:
        return  # the controller writes: it hears every worker's reports
    slowest = sorted(_durations, key=lambda node: -_durations[node])[:KEPT]
    Path(target).write_text("".join(f"{node}\n" for node in slowest), encoding="utf-8")
