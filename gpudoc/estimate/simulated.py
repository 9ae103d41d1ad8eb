"""``estimate --simulate``: the peak from a simulated training step, the formula when it cannot run.

The simulation (``gpudoc.estimate.simulate``) answers for the code the job runs; what it cannot
see (the CUDA context, the allocator's slack, DDP's gradient buckets) is added as the formula does.
The largest micro batch that fits takes one more simulation than the estimate's own: with a GPU's
capacity known, the estimate's helper run also steps two larger micro batches, whose line gives the
forward/backward peak's growth per sample where the activations set it (linear in the micro batch
for a fixed code path; at small batches a transient that does not grow can set the peak); the size
that line predicts is simulated to verify it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from gpudoc.errors import ProfileError
from gpudoc.estimate import terms, zero_settings
from gpudoc.estimate.estimator import MAX_SEARCH_MICRO_BATCH, Estimate, _describe, estimate
from gpudoc.estimate.inputs import LORA_READING_NOTES, ModelShape, TrainSetup, model_shape, train_setup
from gpudoc.estimate.loading import LOAD, load_note
from gpudoc.estimate.sim_spec import simulation_spec, unsupported_reason
from gpudoc.estimate.simulate import HelperSession, SimulationUnavailable
from gpudoc.units import format_bytes

_KINDS = ("weights", "gradients", "optimizer", "activations", "temporaries")


@dataclass(frozen=True)
class SimulateOptions:
    """Where and how the helper runs: the job's interpreter, its environment and directory."""

    python: str
    environ: Mapping[str, str]
    cwd: Path
    timeout_s: float | None = None  # the profile's [estimate] timeout_s; None: the default
    use_cache: bool = True


def simulate_enabled(profile: Any) -> bool:
    """``[estimate] simulate = true``: check, the run gate and fix simulate too."""
    return bool((getattr(profile, "estimate", None) or {}).get("simulate", False))


def timeout_of(profile: Any) -> float | None:
    """``[estimate] timeout_s``, None when the profile sets none (the helper's default applies)."""
    value = (getattr(profile, "estimate", None) or {}).get("timeout_s")
    return float(value) if value else None


# Simulations the search for the largest micro batch may add to the estimate's own helper run.
_SEARCH_SIMULATIONS = 1
_MIB = 1 << 20


@dataclass(frozen=True)
class _Point:
    """One simulated micro batch size: its forward/backward and optimizer-step peaks."""

    size: int
    fb: int
    step: int

    @property
    def peak(self) -> int:
        return max(self.fb, self.step)


def _point(run: Mapping[str, Any], extra: int) -> _Point:
    stages = run["steady_state"].get("stage_peaks") or {}
    fb = max(int(stages.get("forward", 0)), int(stages.get("backward", 0)), int(stages.get("setup", 0)))
    return _Point(int(run["micro_batch_size"]), fb + extra, int(stages.get("optimizer", 0)) + extra)


def simulated_estimate(profile: Any, options: SimulateOptions, *, gpu_total_bytes: int | None = None,
                       history: Any = ()) -> Estimate:
    """The simulated estimate of ``profile``; the formula's, with the reason in ``notes``, whenever the
    simulation is unavailable (``source`` says which answered)."""
    if gpu_total_bytes is None and getattr(profile, "gpu", None) and profile.gpu.get("memory_gib"):
        gpu_total_bytes = int(float(profile.gpu["memory_gib"]) * 1024**3)
    notes: list[str] = []
    shape: ModelShape | None = None
    shape_error: ProfileError | None = None
    try:
        shape, shape_notes, extras = model_shape(profile)
    except ProfileError as exc:
        if not profile.model.get("factory"):
            raise
        shape_error, extras, shape_notes = exc, {}, []
    setup = zero_settings.setup_with_job_settings(train_setup(profile, notes, extras), profile)
    try:
        reason = unsupported_reason(profile, setup, shape)
        if reason:
            raise SimulationUnavailable(reason)
        with HelperSession(python=options.python, environ=options.environ, cwd=options.cwd,
                           timeout_s=options.timeout_s, use_cache=options.use_cache) as helper:
            return _simulate(profile, helper, shape, setup, notes + shape_notes, gpu_total_bytes)
    except SimulationUnavailable as exc:
        if shape_error is not None:
            raise ProfileError(f"{shape_error} (the simulation that needs no shapes is unavailable: {exc})") from None
        fallback = estimate(profile, gpu_total_bytes=gpu_total_bytes, history=history)
        return replace(fallback, notes=[f"simulation unavailable, the formula answers: {exc}", *fallback.notes])


def _simulate(profile: Any, helper: HelperSession, shape: ModelShape | None, setup: TrainSetup,
              notes: list[str], gpu_total_bytes: int | None) -> Estimate:
    size = setup.micro_batch_size

    def run(sizes: list[int]) -> dict:
        spec, spec_notes = simulation_spec(profile, shape, setup, sizes)
        for note in spec_notes:
            if note not in notes:
                notes.append(note)
        return helper.ask(spec)

    # With a capacity to search against, two larger micro batches in the same run: the slope where the
    # activations set the peak (each size costs a forward and backward, not another helper run).
    larger = min(MAX_SEARCH_MICRO_BATCH - 1, 4 * size + 4)
    result = run([size, size + 1, larger, larger + 1] if gpu_total_bytes and larger > size + 1 else [size, size + 1])
    # DDP's reducer keeps a bucket copy of every gradient (the formula's ddp_bucket_bytes term).
    ddp = setup.world_size > 1 and setup.sharding_stage == 0  # DeepSpeed's own buckets are simulated
    extra = round(terms.ddp_bucket_bytes(result.get("trainable_bytes", 0))) if ddp else 0
    if extra:
        notes.append(f"DDP over {setup.world_size} GPUs: its gradient buckets are added to the simulated step")
    if result.get("own_adapters"):
        notes[:] = [n for n in notes if not n.startswith(LORA_READING_NOTES)]
    notes.extend(n for n in result.get("notes", []) if n not in notes)
    main = result["runs"][0]
    points = {int(r["micro_batch_size"]): _point(r, extra) for r in result["runs"]}
    slope = max(0, points[size + 1].fb - points[size].fb)
    first, steady = int(main["first_step"]["peak_bytes"]) + extra, int(main["steady_state"]["peak_bytes"]) + extra
    step_name = "steady_state" if steady >= first else "first_step"
    chosen = main[step_name]
    breakdown = {k: int(chosen["breakdown"].get(k, 0)) for k in _KINDS}
    if extra:
        breakdown["workspace"] = extra
    stage = {"forward": "forward", "backward": "backward", "optimizer": "optimizer_step"}.get(chosen["stage"],
                                                                                             chosen["stage"])
    phases = {"first_step": first, "steady_state": steady}
    load = result.get("load")
    if load:  # a 4-bit model quantized at load (``simhelper.load``): before any step, so no DDP bucket yet
        phases[LOAD] = int(load["peak_bytes"])
        if phases[LOAD] > max(first, steady):
            stage = LOAD
            breakdown = {**dict.fromkeys(_KINDS, 0), "weights": int(load["weights_bytes"]),
                         "temporaries": int(load["temporaries_bytes"])}
            notes.append(load_note(str(load["library"]), int(load["temporaries_bytes"])))
    peak = sum(breakdown.values())
    # Allocated once and kept (no allocator slack): the weights and the optimizer states, the same at
    # every micro batch; at the load only its weights. Under ZeRO-3 the simulated weights include the
    # parameters gathered module by module, which churn: only the states count as kept there.
    kept = main["steady_state"]["breakdown"]
    resident = int(kept.get("optimizer", 0)) + (int(kept.get("weights", 0)) if setup.zero_stage != 3 else 0)
    target = float(getattr(profile, "target_utilization", 0.85))
    largest = None
    if gpu_total_bytes:
        largest = _largest_fitting(points, gpu_total_bytes * target, setup, run, extra, notes, resident)
        loaded = phases.get(LOAD, 0)  # no micro batch fits where the model does not load
        load_kept = int(load["weights_bytes"]) if load else 0
        if loaded + terms.allocator_slack_bytes(loaded, load_kept, expandable_segments=setup.expandable_segments) \
                + setup.stack.context_bytes() > gpu_total_bytes * target:
            largest = 0
        far, far_slope = _top_line(points)
        if far.size > size + 1 and far_slope > 4 * slope + _MIB:
            notes.append(f"one more sequence adds {format_bytes(slope)} at micro batch {size}: a part of the step "
                         f"that does not grow with the batch sets the peak there; at larger micro batches each "
                         f"adds {format_bytes(far_slope)}")
    context = setup.stack.context_bytes()
    slack = round(terms.allocator_slack_bytes(peak, breakdown["weights"] if stage == LOAD else resident,
                                              expandable_segments=setup.expandable_segments))
    versions = dict(result.get("versions") or {})
    return Estimate(
        peak_bytes=peak, breakdown=breakdown, max_micro_batch_size=largest,
        phases=phases, peak_phase=stage, source="simulation",
        notes=notes, context_bytes=int(context), slack_bytes=slack,
        gpu_total_bytes=int(gpu_total_bytes) if gpu_total_bytes else None, target_utilization=target,
        micro_batch_size=size, per_sample_bytes=slope,
        inputs=_describe_any(shape, setup), versions=versions, peak_step=step_name,
    )


def _describe_any(shape: ModelShape | None, setup: TrainSetup) -> dict:
    if shape is None:
        return {"micro_batch_size": setup.micro_batch_size, "max_seq_len": setup.seq_len,
                "precision": setup.precision, "world_size": setup.world_size}
    from gpudoc.estimate.inputs import Inputs

    return _describe(Inputs(shape=shape, setup=setup))


def _top_line(points: Mapping[int, _Point]) -> tuple[_Point, float]:
    """The largest micro batch simulated, and the forward/backward peak's growth per sample on the line
    from the second largest to it."""
    high, low = (points[size] for size in sorted(points)[-1:-3:-1])
    return high, (high.fb - low.fb) / (high.size - low.size)


def _largest_fitting(points: dict[int, _Point], budget: float, setup: TrainSetup,
                     run: Callable[[list[int]], dict], extra: int, notes: list[str], resident: int) -> int:
    """The largest micro batch whose simulated peak + slack + context stays under ``budget``, by at
    most ``_SEARCH_SIMULATIONS`` more simulations. Each guess follows the line through the two largest
    micro batches simulated so far. Where a transient that does not grow with the batch (a tied
    embedding's gradients, say) still sets the peak there, the guess may overshoot; the answer is
    then read, unsimulated, off the chord from the largest size that fits to the one that did not:
    the peak, the larger of a constant and a line, is convex, so the chord lies above it and the size
    it gives fits."""
    context = setup.stack.context_bytes()
    # The largest peak allocated whose slack and context still fit.
    room = terms.allocated_from_reserved(budget - context, resident, expandable_segments=setup.expandable_segments)

    def fits(point: _Point) -> bool:
        slack = terms.allocator_slack_bytes(point.peak, resident, expandable_segments=setup.expandable_segments)
        return point.peak + slack + context <= budget

    def guess_between(low: _Point, high: _Point) -> int:
        line = (high.fb - low.fb) / (high.size - low.size)
        if line <= 0:
            return low.size
        return max(0, math.floor(low.size + (room - low.fb) / line))

    def guess() -> int:
        high, line = _top_line(points)
        if not fits(replace(high, fb=0)):  # the optimizer step alone does not fit
            return 0
        if line <= 0:
            return MAX_SEARCH_MICRO_BATCH
        return max(0, min(MAX_SEARCH_MICRO_BATCH, math.floor(high.size + (room - high.fb) / line)))

    good = max((p.size for p in points.values() if fits(p)), default=0)
    bad = min((p.size for p in points.values() if not fits(p)), default=None)
    left = _SEARCH_SIMULATIONS
    while left:
        size = min(guess(), bad - 1 if bad is not None else MAX_SEARCH_MICRO_BATCH)
        if size <= good:
            break
        left -= 1
        checked = _point(run([size])["runs"][0], extra)
        points[size] = checked
        if fits(checked):
            good = size
        else:
            bad = size
        if bad is not None and bad - good <= 1:
            break
    if bad is not None and good == 0 and bad > 1 and 1 not in points and left:
        checked = _point(run([1])["runs"][0], extra)
        good = 1 if fits(checked) else 0
    elif bad is not None and good > 0 and bad - good > 1:
        chord = min(guess_between(points[good], points[bad]), bad - 1)
        if chord > good:
            notes.append(f"largest micro batch {chord}: read off the line between the simulated {good} (fits) and "
                         f"{bad} (does not), not simulated itself")
            good = chord
    if bad is None and good >= MAX_SEARCH_MICRO_BATCH:
        notes.append(f"the activations do not grow with the micro batch up to {MAX_SEARCH_MICRO_BATCH}")
    return good
