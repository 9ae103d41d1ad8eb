"""Learning from runs: measured peaks of earlier runs of the same profile correct the model.

The forward/backward phase is linear in the micro batch: ``fb(b) = S + b * a`` (S: weights,
optimizer, working buffers; a: activations + logits of one sequence). Each measured run gives one
point. With one micro batch size measured, the model's static part is kept and the per-sample part
rescaled; with two or more different micro batches, both scales come from least squares. The scales
(not absolute bytes) carry over to other knob settings, so the ladder's what-ifs improve too.

Run records hold NVML's view of the GPU (``peak_memory_bytes``: CUDA context + the allocator's
reserved pool), so the context and the modelled slack (on what is not kept: ``terms``) are taken
off before comparing with the model's ``max_memory_allocated`` figure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, Protocol

from gpudoc.errors import GpudocError
from gpudoc.estimate import fsdp, terms
from gpudoc.estimate.inputs import Inputs, train_setup
from gpudoc.estimate.model import Phases, compute_phases


class PastRun(Protocol):
    """What the estimator reads of an earlier run (a ``gpudoc.runs.record.RunRecord``)."""

    @property
    def peak_bytes(self) -> int | None: ...

    @property
    def failed_oom(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    @property
    def knobs(self) -> dict[str, Any]: ...

    @property
    def launch(self) -> dict[str, Any]: ...

    @property
    def env_set(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class Point:
    static: float
    per_sample: float
    micro_batch: int
    measured: float  # allocated-equivalent bytes


@dataclass(frozen=True)
class Correction:
    static_scale: float
    per_sample_scale: float
    runs: int
    notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"formula corrected by {self.runs} measured run{'s' if self.runs != 1 else ''}"

    def apply(self, inputs: Inputs, phases: Phases) -> float:
        static, per_sample = linear_parts(inputs)
        b = inputs.setup.micro_batch_size
        fb = self.static_scale * static + self.per_sample_scale * per_sample * b
        return max(fb, self.static_scale * phases.step_total)


def linear_parts(inputs: Inputs) -> tuple[float, float]:
    """(S, a) of the forward/backward phase: its total at micro batch 0 and the slope per sample."""
    zero = compute_phases(inputs.with_micro_batch(0)).fb_total
    one = compute_phases(inputs.with_micro_batch(1)).fb_total
    return zero, one - zero


def _usable(record: PastRun) -> bool:
    if record.failed_oom:
        return False  # an OOM's peak is where it died, not what it needed
    return record.finished


def _record_inputs(inputs: Inputs, record: PastRun) -> Inputs | None:
    knobs = record.knobs
    if not knobs:
        return None
    launch = record.launch
    world = inputs.setup.world_size
    if launch.get("nproc_per_node"):
        world = int(launch.get("nproc_per_node") or 1) * int(launch.get("nnodes") or 1)
    shim = SimpleNamespace(
        train={"lora_targets": list(inputs.setup.lora_targets), **knobs},
        env=dict(record.env_set), world_size=world, model={},
    )
    try:
        setup = train_setup(shim, [])
    except GpudocError:
        return None
    return replace(inputs, setup=setup)


def correction_from_history(inputs: Inputs, history: Iterable[PastRun]) -> Correction | None:
    """The correction the measured runs imply, or None without a usable measurement."""
    points: list[Point] = []
    for record in history or ():
        measured = record.peak_bytes
        if measured is None or not _usable(record):
            continue
        rec_inputs = _record_inputs(inputs, record)
        if rec_inputs is None:
            continue
        static, slope = linear_parts(rec_inputs)
        # The estimate's own overhead taken off: the context, then the slack on what is not kept.
        context = rec_inputs.setup.stack.context_bytes()
        phases = compute_phases(rec_inputs)  # and what FSDP reserves beside the peak (``fsdp.reserved_beside``)
        beside = fsdp.reserved_beside(rec_inputs.setup, phases)
        allocated = terms.allocated_from_reserved(measured - context - beside, phases.resident,
                                                  expandable_segments=rec_inputs.setup.expandable_segments)
        if allocated <= 0:
            continue
        points.append(Point(static, slope * rec_inputs.setup.micro_batch_size,
                            rec_inputs.setup.micro_batch_size, allocated))
    if not points:
        return None
    notes: list[str] = []
    if len({p.micro_batch for p in points}) >= 2:
        fitted = _least_squares(points)
        if fitted is not None:
            qs, qa = fitted
            notes.append(f"{len(points)} measured runs: static part x{qs:.2f}, per-sample part x{qa:.2f}")
            return Correction(qs, qa, len(points), tuple(notes))
    # One micro batch size: keep the modelled static part, rescale the per-sample part.
    ratios = []
    for p in points:
        if p.per_sample > 0 and p.measured > p.static:
            ratios.append((p.measured - p.static) / p.per_sample)
    if ratios:
        qa = sum(ratios) / len(ratios)
        notes.append(f"measured peak{'s' if len(points) > 1 else ''}: per-sample part x{qa:.2f}")
        return Correction(1.0, qa, len(points), tuple(notes))
    # The runs used less than the modelled static part: scale the whole figure down to match.
    scale = sum(p.measured / (p.static + p.per_sample) for p in points) / len(points)
    notes.append(f"measured peaks are below the modelled static memory: whole estimate x{scale:.2f}")
    return Correction(scale, scale, len(points), tuple(notes))


def _least_squares(points: list[Point]) -> tuple[float, float] | None:
    """Solve measured = qs * static + qa * per_sample in the least-squares sense (2x2 normal
    equations); None when degenerate or unphysical (a negative scale)."""
    sxx = sum(p.static * p.static for p in points)
    syy = sum(p.per_sample * p.per_sample for p in points)
    sxy = sum(p.static * p.per_sample for p in points)
    bx = sum(p.static * p.measured for p in points)
    by = sum(p.per_sample * p.measured for p in points)
    det = sxx * syy - sxy * sxy
    if abs(det) <= 1e-12 * max(1.0, sxx * syy):
        return None
    qs = (bx * syy - by * sxy) / det
    qa = (sxx * by - sxy * bx) / det
    if qs <= 0 or qa <= 0:
        return None
    return qs, qa
