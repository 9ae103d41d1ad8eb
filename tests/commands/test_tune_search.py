"""`gpudoc tune`'s search on its own: the global batch kept exact, the launches bounded, and the measured
per-step peaks steering it (a budget-driven memory model stands in for the card)."""

from __future__ import annotations

import math

import pytest

from gpudoc.commands.tune_search import candidates, inexact, launch_bound, predicted, search
from gpudoc.results.tune import FAILED, FITS, OOM, Trial

GIB = 2**30


def card(capacity: int, fixed: int, per_sample: int, *, measured: bool = True):
    """A job on a card: the peak grows by ``per_sample`` a sample; above the capacity it runs out."""
    ran: list[int] = []

    def run(micro: int) -> Trial:
        ran.append(micro)
        peak = fixed + per_sample * micro
        fits = peak <= capacity
        return Trial(micro, 0, FITS if fits else OOM, peak_bytes=peak if fits and measured else None)

    return run, ran


def test_only_micro_batches_that_keep_the_global_batch_exact_are_candidates():
    assert candidates(24, 2, 1, 16) == [1, 2, 3, 4, 6, 12]
    assert candidates(24, 2, 3, 5) == [3, 4]
    assert inexact(5, 24, 2) == ("24 samples per optimizer step over 2 process(es) is 12 per process: "
                                 "a micro batch of 5 needs an accumulation of 2.4")


def test_the_measured_peaks_land_the_search_in_fewer_launches_than_halving():
    options = candidates(720, 1, 1, 720)  # the 30 divisors of 720
    run, ran = card(80 * GIB, 10 * GIB, GIB // 2)  # fits up to 140 samples: 120 is the answer
    found = search(options, 16, run, capacity=80 * GIB, bound=launch_bound(1, 720),
                   exact=lambda m: inexact(m, 720, 1))
    assert found.best is not None and found.best.micro_batch_size == 120
    # From 16 the straight line through zero overstates the per-sample cost and guesses low (67, so
    # 60); two fitting peaks give the slope, the guess 132 (so 120), and the bracket closes at 144.
    assert ran == [16, 60, 120, 144]
    assert [m for m, _ in found.skipped] == [67, 132]
    blind, blind_ran = card(80 * GIB, 10 * GIB, GIB // 2, measured=False)
    assert search(options, 16, blind, capacity=80 * GIB, bound=launch_bound(1, 720),
                  exact=lambda m: "").best.micro_batch_size == 120
    assert blind_ran == [16, 60, 144, 80, 90, 120]  # pass or fail alone: halving


def test_a_prediction_between_candidates_is_said_and_the_candidate_below_it_tried():
    options = candidates(24, 1, 1, 24)  # 1, 2, 3, 4, 6, 8, 12, 24
    run, ran = card(10 * GIB, 0, GIB)  # fits up to 10: 8 is the answer; 2 predicts 9 (95% of 10)
    found = search(options, 2, run, capacity=10 * GIB, bound=launch_bound(1, 24), exact=lambda m: inexact(m, 24, 1))
    assert ran[:2] == [2, 8] and found.best.micro_batch_size == 8
    assert found.skipped == ((9, inexact(9, 24, 1)),)


@pytest.mark.parametrize("high", [1, 2, 3, 7, 16, 33, 64])
def test_every_start_and_every_card_land_within_the_bound(high):
    options = list(range(1, high + 1))
    bound = launch_bound(1, high)
    assert bound == math.ceil(math.log2(high)) + 1
    for fit_up_to in range(high + 1):
        for start in (1, max(high // 2, 1), high, 2 * high):
            for measured in (True, False):
                run, ran = card(fit_up_to * GIB + GIB // 2, 0, GIB, measured=measured)
                found = search(options, start, run, capacity=fit_up_to * GIB + GIB // 2, bound=bound,
                               exact=lambda m: "")
                assert len(ran) <= bound, (fit_up_to, start, ran)
                assert (found.best.micro_batch_size if found.best else 0) == fit_up_to


def test_a_trial_that_fails_for_another_reason_stops_the_search():
    ran = []

    def run(micro: int) -> Trial:
        ran.append(micro)
        return Trial(micro, 1, FAILED if micro == 2 else FITS)

    found = search([1, 2, 3, 4], 2, run, capacity=None, bound=3, exact=lambda m: "")
    assert ran == [2] and found.failed is not None and found.best is None


def test_a_prediction_needs_a_fitting_peak_and_a_known_card():
    fit = Trial(4, 1, FITS, peak_bytes=4 * GIB)
    assert predicted([fit], None) is None
    assert predicted([Trial(4, 1, OOM)], 8 * GIB) is None
    assert predicted([fit], 8 * GIB) == 7  # 95% of 8 GiB at 1 GiB a sample
    assert predicted([fit, Trial(8, 1, FITS, peak_bytes=6 * GIB)], 16 * GIB) == 26  # 2 GiB + 0.5 GiB a sample
