"""The tuning ladder: a diagnosis and a profile in, the next changes to try out (see ``climb``)."""

from gpudoc.ladder.climb import (
    MEMORY_CAUSE,
    RUNG_NAMES,
    WELL_UNDER,
    LadderResult,
    Skipped,
    Suggestion,
    split_global_batch,
    suggest,
    upward,
    upward_result,
)

__all__ = ["MEMORY_CAUSE", "RUNG_NAMES", "WELL_UNDER", "LadderResult", "Skipped", "Suggestion", "split_global_batch", "suggest", "upward", "upward_result"]
