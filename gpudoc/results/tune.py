"""`gpudoc tune`: its trials and the largest micro batch that fit (``gpudoc.commands.tune`` builds it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gpudoc.results.core import status_of

FITS, OOM, FAILED = "fits", "oom", "failed"


@dataclass(frozen=True)
class Trial:
    """One short run at one micro batch: what it ended as and what the probe measured in it."""

    micro_batch_size: int
    gradient_accumulation_steps: int
    outcome: str  # fits | oom | failed (not memory: the search stops)
    run_id: str | None = None
    peak_bytes: int | None = None  # the per-step peak (reserved where the probe saw it)
    seconds_per_step: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "micro_batch_size": self.micro_batch_size,
                "gradient_accumulation_steps": self.gradient_accumulation_steps, "outcome": self.outcome,
                "peak_bytes": self.peak_bytes, "seconds_per_step": self.seconds_per_step}


@dataclass(frozen=True)
class Search:
    """The trials in the order they ran, the micro batches passed over (micro batch, why), the bound
    on launches the search kept to."""

    trials: tuple[Trial, ...]
    skipped: tuple[tuple[int, str], ...]
    launch_bound: int

    @property
    def best(self) -> Trial | None:
        fitting = [t for t in self.trials if t.outcome == FITS]
        return max(fitting, key=lambda t: t.micro_batch_size) if fitting else None

    @property
    def failed(self) -> Trial | None:
        return next((t for t in self.trials if t.outcome == FAILED), None)


@dataclass(frozen=True)
class TuneResult:
    command: ClassVar[str] = "tune"
    tune_id: str
    global_batch_size: int
    world_size: int
    before: tuple[int, int]  # the job's own micro batch and accumulation
    search: Search
    capacity_bytes: int | None
    exit_code: int
    applied: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return status_of(self.exit_code)

    @property
    def headroom_bytes(self) -> int | None:
        best = self.search.best
        if best is None or best.peak_bytes is None or self.capacity_bytes is None:
            return None
        return self.capacity_bytes - best.peak_bytes

    def json_body(self) -> dict[str, Any]:
        best = self.search.best
        return {
            "tune_id": self.tune_id, "global_batch_size": self.global_batch_size, "world_size": self.world_size,
            "best": None if best is None else {
                "micro_batch_size": best.micro_batch_size,
                "gradient_accumulation_steps": best.gradient_accumulation_steps,
                "peak_bytes": best.peak_bytes, "headroom_bytes": self.headroom_bytes,
                "seconds_per_step": best.seconds_per_step, "run_id": best.run_id},
            "trials": [t.to_dict() for t in self.search.trials],
            "skipped": [{"micro_batch_size": m, "reason": why} for m, why in self.search.skipped],
            "launch_bound": self.search.launch_bound, "capacity_bytes": self.capacity_bytes,
            "applied": self.applied, "notes": list(self.notes),
        }
