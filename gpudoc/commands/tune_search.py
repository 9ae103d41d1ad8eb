"""`gpudoc tune`'s search, pure: which micro batch to try next, from what the trials so far measured.

The candidates are the micro batches that keep micro x accumulation x world equal to the job's global
batch (the divisors of the per-rank batch between --min and --max). The search keeps a bracket: the
largest candidate known to fit and the smallest known to run out of memory. Its next trial is the
micro batch the measured per-step peaks predict (a straight line through the two largest fitting
trials, or through zero and the one there is, which overstates the per-sample cost, so the guess errs
low), taken only when it still leaves enough launches to finish by halving; else the bracket's middle.
Halving alone resolves n candidates in ``n.bit_length()`` launches, so the whole search lands in
``ceil(log2(N)) + 1`` launches for the N micro batches from --min to --max.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpudoc.results.tune import FAILED, FITS, Search, Trial

# A prediction aims this far below the card's capacity: the allocator's fragmentation and a step's
# variation are not in a straight line through two peaks.
PREDICT_MARGIN = 0.95


def candidates(global_batch: int, world: int, low: int, high: int) -> list[int]:
    """The micro batches from ``low`` to ``high`` whose accumulation keeps the global batch exact."""
    per_rank = global_batch // world
    return [m for m in range(max(low, 1), min(high, per_rank) + 1) if per_rank % m == 0]


def inexact(micro: int, global_batch: int, world: int) -> str:
    """Why ``micro`` cannot keep the global batch: the accumulation it would need is no whole number."""
    return (f"{global_batch} samples per optimizer step over {world} process(es) is {global_batch / world:g} "
            f"per process: a micro batch of {micro} needs an accumulation of {global_batch / world / micro:.3g}")


def launch_bound(low: int, high: int) -> int:
    """At most ``ceil(log2(N)) + 1`` launches for the N micro batches from ``low`` to ``high``."""
    return math.ceil(math.log2(max(high - low + 1, 1))) + 1


def predicted(trials: list[Trial], capacity: int | None) -> int | None:
    """The largest micro batch the fitting trials' peaks say fits ``capacity``; None without both."""
    points = sorted({t.micro_batch_size: t.peak_bytes for t in trials if t.outcome == FITS and t.peak_bytes}.items())
    if capacity is None or not points:
        return None
    (m1, p1), (m2, p2) = points[-2:] if len(points) > 1 else ((0, 0), points[-1])
    per_sample = (p2 - p1) / (m2 - m1)
    if per_sample <= 0:
        return None
    return int((capacity * PREDICT_MARGIN - (p2 - per_sample * m2)) // per_sample)


def search(options: list[int], start: int, run: Callable[[int], Trial], *, capacity: int | None, bound: int,
           exact: Callable[[int], str | None]) -> Search:
    """Try micro batches from ``options`` (ascending) with ``run`` until the largest that fits is known.
    ``start`` is the first guess (the estimate's largest micro batch, else the job's own); ``exact``
    says why a guessed micro batch outside ``options`` cannot keep the global batch (it is passed over
    for the nearest candidate below it)."""
    fit, oom = -1, len(options)  # indices: the largest known to fit, the smallest known not to
    trials: list[Trial] = []
    skipped: list[tuple[int, str]] = []
    guess: int | None = start
    while oom - fit > 1:
        index = _index_of(guess, options, skipped, exact) if guess is not None else None
        if index is not None:  # a guess beyond what is known is the nearest candidate still open
            index = max(fit + 1, min(index, oom - 1))
        # Either answer of the trial must leave launches enough to finish by halving.
        if index is None or max((oom - index - 1).bit_length(), (index - fit - 1).bit_length()) > bound - len(trials) - 1:
            index = (fit + oom) // 2  # halving: always within the bound
        trial = run(options[index])
        trials.append(trial)
        if trial.outcome == FAILED:
            break
        if trial.outcome == FITS:
            fit = index
        else:
            oom = index
        guess = predicted(trials, capacity)
    return Search(tuple(trials), tuple(skipped), bound)


def _index_of(guess: int, options: list[int], skipped: list[tuple[int, str]],
              exact: Callable[[int], str | None]) -> int:
    """The candidate at or below ``guess`` (a guess that cannot keep the global batch is said)."""
    below = [i for i, m in enumerate(options) if m <= guess]
    if guess not in options and options and options[0] <= guess <= options[-1]:
        why = exact(guess)
        if why and all(m != guess for m, _ in skipped):
            skipped.append((guess, why))
    return below[-1] if below else 0
