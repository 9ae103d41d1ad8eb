"""The change a relaunch makes: an environment rung that cannot cover the shortfall alone rides
with the next rung instead of costing a relaunch of its own."""

from __future__ import annotations

import pytest

from gpudoc.ladder.model import LadderResult, Suggestion

MIB = 1 << 20
ALLOC = Suggestion("expandable-segments", env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
                   expected_saving_bytes=18 * MIB, why="fragmentation")
HALVE = Suggestion("halve-micro-batch", changes={"micro_batch_size": [8, 4], "gradient_accumulation_steps": [2, 4]},
                   expected_saving_bytes=2048 * MIB, why="halves the activations")


def test_env_rung_below_the_shortfall_is_folded_into_the_next():
    chosen = LadderResult([ALLOC, HALVE], shortfall_bytes=1000 * MIB).first_profile_change()
    assert chosen is not None
    assert chosen.rung == "expandable-segments+halve-micro-batch"
    assert chosen.changes == HALVE.changes and chosen.env == ALLOC.env
    assert chosen.expected_saving_bytes == 2066 * MIB
    assert "18.0 MiB" in chosen.why and "1000.0 MiB" in chosen.why


@pytest.mark.parametrize(("shortfall", "saving"), [(10 * MIB, 18 * MIB), (None, 18 * MIB), (1000 * MIB, None)])
def test_env_rung_that_may_cover_the_shortfall_gets_its_own_relaunch(shortfall, saving):
    alloc = Suggestion(ALLOC.rung, env=ALLOC.env, expected_saving_bytes=saving)
    assert LadderResult([alloc, HALVE], shortfall_bytes=shortfall).first_profile_change() is alloc


def test_nothing_to_fold_into():
    assert LadderResult([ALLOC], shortfall_bytes=1000 * MIB).first_profile_change() is ALLOC
    assert LadderResult([], shortfall_bytes=1000 * MIB).first_profile_change() is None
