"""The model against 42 published measurements (tests/fixtures/memory/cases.jsonl).

Compared like with like: ``peak_bytes`` against max_memory_allocated; plus the modelled allocator
slack against max_memory_reserved; plus slack and CUDA context against nvidia-smi and against the
VRAM budget of "largest that fits" boundaries; OOM rows must be predicted over the card's capacity.
Exclusions are listed with their reason in ``cases.EXCLUDED``. Run with ``-s`` to see the table.
"""

from __future__ import annotations

import statistics

import pytest

from tests.conftest import MEMORY_CASES
from tests.estimate.cases import EXCLUDED, compare, load_records

RECORDS = load_records(MEMORY_CASES)
COMPARISONS = [compare(r) for r in RECORDS if r["id"] not in EXCLUDED]
NUMERIC = [c for c in COMPARISONS if c.error is not None]


def _table() -> str:
    lines = [f"{'case':<12} {'metric':<9} {'predicted':>10} {'measured':>10} {'error':>8}"]
    for c in COMPARISONS:
        if c.error is None:
            verdict = "OOM ok" if c.predicted > c.capacity else "OOM MISSED"
            lines.append(f"{c.id:<12} {c.kind:<9} {c.predicted / 1e9:>9.2f}G {c.capacity / 1e9:>9.2f}G {verdict:>8}")
        else:
            lines.append(f"{c.id:<12} {c.kind:<9} {c.predicted / 1e9:>9.2f}G {c.measured / 1e9:>9.2f}G "
                         f"{100 * c.error:>+7.1f}%")
    errors = [abs(c.error) for c in NUMERIC]
    lines.append(f"median |error| {100 * statistics.median(errors):.1f}%, within 25%: "
                 f"{100 * sum(e <= 0.25 for e in errors) / len(errors):.0f}%, "
                 f"under {sum(c.error < 0 for c in NUMERIC)} / over {sum(c.error > 0 for c in NUMERIC)}, "
                 f"excluded {sorted(EXCLUDED)}")
    return "\n".join(lines)


def test_every_record_is_compared_or_excluded_with_a_reason():
    ids = {r["id"] for r in RECORDS}
    assert len(ids) == len(RECORDS) == 42
    assert set(EXCLUDED) <= ids
    assert all(len(reason) > 40 for reason in EXCLUDED.values())
    assert len(EXCLUDED) <= 4


def test_calibration_error_bounds():
    print("\n" + _table())
    errors = [abs(c.error) for c in NUMERIC]
    assert len(NUMERIC) >= 30
    assert statistics.median(errors) <= 0.15
    assert sum(e <= 0.25 for e in errors) >= 0.9 * len(errors)
    under = sum(c.error < 0 for c in NUMERIC)
    over = sum(c.error > 0 for c in NUMERIC)
    assert under < over, "under-predictions cause OOMs: they must be the rarer side"


@pytest.mark.parametrize("comparison", [c for c in COMPARISONS if c.kind == "oom"], ids=lambda c: c.id)
def test_oom_rows_are_predicted_over_capacity(comparison):
    assert comparison.predicted > comparison.capacity


def test_fitting_rows_are_predicted_under_the_card():
    """A run that fit on its GPU must not be predicted as impossible there (beyond 10%)."""
    for c in NUMERIC:
        if c.capacity and c.kind != "boundary":
            assert c.peak <= 1.1 * c.capacity, c.id
