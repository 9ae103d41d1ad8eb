"""Everything a rung looks at, gathered once: the diagnosis, the profile, facts, history, savings.

Rungs are pure functions over this context. The only thing computed here that costs anything is
the memory estimate of a changed profile, and that is cached per knob set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from gpudoc import allocator
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder.model import PastRun
from gpudoc.profiles.model import Profile
from gpudoc.units import GIB, format_bytes

# GPUs without bf16 (compute capability < 8.0), by the names drivers report, for when facts carry
# no compute capability (a log from another machine, a snapshot without it).
_PRE_AMPERE_MARKERS = (
    "v100", "t4", "p100", "p40", "p4", "k80", "k40", "m60", "m40", "titan v", "titan xp",
    "rtx 20", "rtx 2080", "rtx 2070", "rtx 2060", "quadro rtx", "gtx", "tesla p", "tesla k",
    "tesla m", "quadro p", "quadro gv100", "titan rtx",
)


class Savings:
    """Expected per-GPU memory effect of changing knobs.

    Preference: measured runs of this profile (the slope of peak memory over micro batch size
    between successful runs that differ only there), then the estimator (peak of the current
    profile minus peak of the changed one), then the current estimate's breakdown.
    """

    def __init__(
        self,
        profile: Profile,
        *,
        estimate: Any = None,
        history: Iterable[PastRun] = (),
        capacity_bytes: int | None = None,
    ) -> None:
        self.profile = profile
        self.history = tuple(history)
        self.capacity_bytes = capacity_bytes
        self.notes: list[str] = []
        self._cache: dict[tuple, Any] = {}
        self._estimator: Callable[..., Any] | None = None
        self.current = None
        if callable(estimate):
            self._estimator = estimate
        else:
            self.current = estimate
            self._estimator = _default_estimator()
        if self.current is None:
            self.current = self._estimate(profile)

    # -- estimator ---------------------------------------------------------------------------
    def _estimate(self, profile: Profile) -> Any:
        if self._estimator is None:
            return None
        key = tuple(sorted((k, repr(v)) for k, v in profile.knobs.items()))
        if key in self._cache:
            return self._cache[key]
        try:
            result = self._estimator(profile, gpu_total_bytes=self.capacity_bytes, history=self.history)
        except Exception as exc:
            if not self.notes:
                self.notes.append(_no_estimate(profile, exc))
            result = None
        if result is not None and not getattr(result, "peak_bytes", None):
            result = None
        self._cache[key] = result
        return result

    @property
    def current_peak(self) -> int | None:
        return getattr(self.current, "peak_bytes", None) if self.current is not None else None

    def breakdown_part(self, *words: str) -> int | None:
        breakdown = getattr(self.current, "breakdown", None) or {}
        total = 0
        found = False
        for name, value in breakdown.items():
            if any(w in name.lower() for w in words) and isinstance(value, (int, float)):
                total += int(value)
                found = True
        return total if found else None

    # -- measured ----------------------------------------------------------------------------
    def per_sample_measured(self) -> int | None:
        """Bytes per extra sample of micro batch, from two successful runs differing only there."""
        points: dict[int, int] = {}
        base = {k: v for k, v in self.profile.knobs.items() if k not in ("micro_batch_size", "gradient_accumulation_steps")}
        for record in self.history:
            if not record.succeeded:
                continue
            knobs = record.knobs
            peak = record.peak_bytes
            mbs = knobs.get("micro_batch_size")
            rest = {k: v for k, v in knobs.items() if k not in ("micro_batch_size", "gradient_accumulation_steps")}
            if peak and isinstance(mbs, int) and rest == base:
                points[mbs] = max(points.get(mbs, 0), peak)
        if len(points) < 2:
            return None
        (m1, p1), (m2, p2) = sorted(points.items())[0], sorted(points.items())[-1]
        slope = (p2 - p1) / (m2 - m1)
        return int(slope) if slope > 0 else None

    # -- public ------------------------------------------------------------------------------
    def saving(self, changes: Mapping[str, Any]) -> int | None:
        """Bytes per GPU freed by setting ``changes`` (knob -> new value) on the current profile."""
        if set(changes) <= {"micro_batch_size", "gradient_accumulation_steps"} and "micro_batch_size" in changes:
            per_sample = self.per_sample_measured()
            if per_sample is not None:
                old = int(self.profile.knobs["micro_batch_size"])
                return per_sample * (old - int(changes["micro_batch_size"]))
        if self._estimator is not None and self.current_peak is not None:
            changed = self._estimate(self.profile.with_train(dict(changes)))
            if changed is not None:
                return int(self.current_peak - changed.peak_bytes)
        # Only an estimate object, no estimator: what its breakdown alone can tell.
        activations = self.breakdown_part("activation")
        if activations is None:
            return None
        if "micro_batch_size" in changes and len(set(changes) - {"gradient_accumulation_steps"}) == 1:
            old = int(self.profile.knobs["micro_batch_size"])
            return int(activations * (1 - int(changes["micro_batch_size"]) / old))
        if "max_seq_len" in changes and len(changes) == 1:
            old = int(self.profile.knobs["max_seq_len"])
            return int(activations * (1 - int(changes["max_seq_len"]) / old))
        return None

    def predicted_peak(self, changes: Mapping[str, Any]) -> int | None:
        changed = self._estimate(self.profile.with_train(dict(changes)))
        return getattr(changed, "peak_bytes", None) if changed is not None else None


def _default_estimator() -> Callable[..., Any]:
    from gpudoc.estimate import estimate  # only profiles with [model] pay for it

    return estimate


@dataclass
class Context:
    diagnosis: Diagnosis
    profile: Profile
    facts: Any = None
    history: tuple[PastRun, ...] = ()
    allow_semantic: bool = False
    savings: Savings | None = None
    capacity_bytes: int | None = None
    shortfall_bytes: int | None = None
    shortfall_source: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def needed_bytes(self) -> int | None:
        """What one relaunch should free: the shortfall, plus the headroom the target utilisation
        keeps on the card (the failing allocation is rarely the step's last)."""
        if self.shortfall_bytes is None:
            return None
        if not self.capacity_bytes:
            return self.shortfall_bytes
        return self.shortfall_bytes + int(self.capacity_bytes * (1 - self.profile.target_utilization))

    @property
    def knobs(self) -> Mapping[str, Any]:
        return self.profile.knobs

    def declared(self, knob: str) -> bool:
        return knob in self.profile.knobs

    def saving(self, changes: Mapping[str, Any]) -> int | None:
        return self.savings.saving(changes) if self.savings is not None else None

    # -- facts helpers ------------------------------------------------------------------------
    def gpu_index(self) -> int:
        index = self.diagnosis.gpu_index
        return index if index is not None else 0

    def _fact_gpu(self) -> Any:
        gpus = getattr(self.facts, "gpus", None) or ()
        for gpu in gpus:
            if gpu.index == self.gpu_index():
                return gpu
        return gpus[0] if gpus else None

    def supports_bf16(self) -> bool | None:
        gpu = self._fact_gpu()
        cc = getattr(gpu, "compute_capability", None) if gpu is not None else None
        if cc:
            try:
                return float(cc) >= 8.0
            except ValueError:
                pass
        names = [getattr(gpu, "name", None) if gpu is not None else None, self.profile.gpu.get("name")]
        for record in self.history:
            names.extend(record.gpu_names)
        for name in names:
            if name:
                lowered = name.lower()
                return not any(marker in lowered for marker in _PRE_AMPERE_MARKERS)
        return None

    def alloc_env_name(self) -> str:
        """The allocator variable this job's torch reads: facts, else what the profile uses."""
        torch = getattr(self.facts, "torch", None)
        name = getattr(torch, "alloc_env_name", None) if torch is not None else None
        if name:
            return name
        if self.diagnosis.backend == "hip":
            return allocator.HIP_NAME
        for var in allocator.NAMES:
            if var in self.profile.env:
                return var
        for var in allocator.NAMES:
            if var in self.environment():
                return var
        # Every torch release reads this name (newer ones as a deprecated alias of
        # PYTORCH_ALLOC_CONF), so it is the safe choice when the version is unknown.
        return "PYTORCH_CUDA_ALLOC_CONF"

    def environment(self) -> Mapping[str, str]:
        return getattr(self.facts, "env", None) or {}

    def host_ram_available(self) -> int | None:
        host = getattr(self.facts, "host", None)
        return getattr(host, "ram_available_bytes", None) if host is not None else None

    def ranks_per_host(self) -> int:
        return int(self.profile.launch.get("nproc_per_node") or self.profile.gpu.get("count") or 1)


def capacity_from(diagnosis: Diagnosis | None, facts: Any, profile: Profile,
                  history: Iterable[PastRun]) -> int | None:
    total = diagnosis.total_bytes if diagnosis is not None else None
    if total:
        return int(total)
    gpus = getattr(facts, "gpus", None) or ()
    totals = [g.memory_total_bytes for g in gpus if g.memory_total_bytes]
    index = diagnosis.gpu_index if diagnosis is not None else None
    for gpu in gpus:
        if gpu.index == index and gpu.memory_total_bytes:
            return int(gpu.memory_total_bytes)
    if totals:
        return int(min(totals))
    for record in reversed(tuple(history)):
        recorded = list(record.gpu_totals.values())
        if recorded:
            return int(min(recorded))
    gib = profile.gpu.get("memory_gib")
    return int(gib * GIB) if gib else None


def shortfall(diagnosis: Diagnosis, savings: Savings | None, capacity: int | None, target: float) -> tuple[int | None, str | None]:
    """Bytes the failing run was short by, and where the number comes from.

    The OOM message's own numbers win (the allocation that failed minus what was free); without
    them, the estimate's peak against the target share of the card.
    """
    requested, free = diagnosis.requested_bytes, diagnosis.free_bytes
    if requested is not None and free is not None:
        if requested > free:
            return int(requested - free), (
                f"asked for {format_bytes(requested)} with {format_bytes(free)} free"
            )
        # Free covered the request and it still failed: fragmentation or a reserve; the message
        # says nothing about how much more the run would need.
        return None, None
    peak = savings.current_peak if savings is not None else None
    if peak is not None and capacity:
        budget = int(capacity * target)
        if peak > budget:
            return int(peak - budget), (
                f"estimated peak {format_bytes(peak)} vs {format_bytes(budget)} ({target:.0%} of {format_bytes(capacity)})"
            )
    return None, None


def nice_seq_len(old: int) -> int:
    new = math.floor(old * 3 / 4)
    if old >= 64 and old % 8 == 0:
        new -= new % 8
    return max(new, 1)


def _no_estimate(profile: Profile, exc: Exception) -> str:
    """Why the rungs are not weighed by memory, in the words of what describes the job."""
    if profile.path is None and profile.job is not None:  # no profile: the job's command was read
        if not profile.model:
            return ("no memory estimate for this job: its command names no model whose config.json is here "
                    "(--model_name_or_path, model.name_or_path=, ...); a profile with [model] hf_config = "
                    "\"path/config.json\" gives one")
        return f"no memory estimate for this job ({exc})"
    return f"no memory estimate for this profile ({exc})"
