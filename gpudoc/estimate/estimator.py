"""Peak training memory per GPU: ``estimate(profile)`` -> ``Estimate``.

The model (``gpudoc.estimate.model``) is physics, not a fit: each term in ``gpudoc.estimate.terms``
follows a paper or the framework's documented behaviour. Measured peaks from earlier runs of the
same profile correct the part that grows with the micro batch (``history``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from gpudoc.estimate import fsdp, terms, zero_settings
from gpudoc.estimate.history import Correction, correction_from_history
from gpudoc.estimate.inputs import Inputs, inputs_from_profile
from gpudoc.estimate.loading import LOAD, load_library, load_note
from gpudoc.estimate.model import BREAKDOWN_KEYS, Phases, compute_phases, per_sample_activation_bytes_for

__all__ = [
    "Estimate",
    "estimate",
    "estimate_inputs",
    "estimate_with",
    "max_micro_batch_size",
    "per_sample_activation_bytes",
]

MAX_SEARCH_MICRO_BATCH = 4096


@dataclass(frozen=True)
class Estimate:
    """One estimate. ``peak_bytes`` predicts ``torch.cuda.max_memory_allocated()``;
    ``context_bytes`` and ``slack_bytes`` are what nvidia-smi shows on top of it."""

    peak_bytes: int
    breakdown: dict[str, int]
    max_micro_batch_size: int | None
    phases: dict[str, int]
    peak_phase: str
    source: str
    notes: list[str]
    context_bytes: int
    slack_bytes: int
    gpu_total_bytes: int | None
    target_utilization: float
    micro_batch_size: int
    per_sample_bytes: int
    inputs: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)  # the libraries a simulation ran (empty for the formula)
    peak_step: str = "steady_state"  # first_step | steady_state: which optimizer step peaks

    @property
    def total_bytes(self) -> int:
        """What the job is expected to hold on the GPU: peak + allocator slack + CUDA context."""
        return self.peak_bytes + self.slack_bytes + self.context_bytes

    @property
    def share(self) -> float | None:
        return self.total_bytes / self.gpu_total_bytes if self.gpu_total_bytes else None

    @property
    def fits(self) -> bool | None:
        """Within the target utilisation (the headroom fragmentation and spikes need)."""
        if not self.gpu_total_bytes:
            return None
        return self.total_bytes <= self.gpu_total_bytes * self.target_utilization

    @property
    def fit(self) -> str | None:
        """``fits`` (within the target), ``above_target`` (fits the card, with less headroom than the
        target leaves) or ``does_not_fit`` (more than the card holds); None with no known card."""
        if not self.gpu_total_bytes:
            return None
        if self.fits:
            return "fits"
        return "above_target" if self.total_bytes <= self.gpu_total_bytes else "does_not_fit"

    def to_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes,
            "breakdown": dict(self.breakdown),
            "max_micro_batch_size": self.max_micro_batch_size,
            "micro_batch_size": self.micro_batch_size,
            "phases": dict(self.phases),
            "peak_phase": self.peak_phase,
            "peak_step": self.peak_step,
            "per_sample_bytes": self.per_sample_bytes,
            "context_bytes": self.context_bytes,
            "slack_bytes": self.slack_bytes,
            "total_bytes": self.total_bytes,
            "gpu_total_bytes": self.gpu_total_bytes,
            "share": None if self.share is None else round(self.share, 4),
            "target_utilization": self.target_utilization,
            "fits": self.fits,
            "fit": self.fit,
            "source": self.source,
            "notes": list(self.notes),
            "inputs": dict(self.inputs),
            "versions": dict(self.versions),
        }


def _peak_of(inputs: Inputs, correction: Correction | None) -> tuple[Phases, float]:
    phases = compute_phases(inputs)
    if correction is None:
        return phases, phases.peak
    # Measured runs correct the step; the load before it is the libraries' (``loading``).
    return phases, max(correction.apply(inputs, phases), sum(phases.load.values()))


def _overhead(peak: float, phases: Phases, inputs: Inputs) -> tuple[int, int, float]:
    """The CUDA context, the allocator's reserve beyond ``peak`` (its slack and, under FSDP, the
    gradient shards kept beside it), and those shards alone (said in a note)."""
    # Where the load sets the peak only the weights are kept yet; the quantization's temporaries churn.
    resident = phases.load.get("weights", 0.0) if phases.peak_phase == LOAD else phases.resident
    context = inputs.setup.stack.context_bytes()
    slack = terms.allocator_slack_bytes(peak, resident, expandable_segments=inputs.setup.expandable_segments)
    beside = fsdp.reserved_beside(inputs.setup, phases)
    return int(context), round(slack + beside), beside


def max_micro_batch_size(inputs: Inputs, gpu_total_bytes: int | None, target_utilization: float,
                         correction: Correction | None = None) -> int | None:
    """The largest micro batch whose peak + slack + context stays under target x capacity;
    0 when even one sample does not fit, None when the capacity is unknown."""
    if not gpu_total_bytes:
        return None
    budget = gpu_total_bytes * target_utilization

    def fits(b: int) -> bool:
        phases, peak = _peak_of(inputs.with_micro_batch(b), correction)
        context, slack, _ = _overhead(peak, phases, inputs)
        return peak + slack + context <= budget

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_SEARCH_MICRO_BATCH and fits(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_SEARCH_MICRO_BATCH:
        return MAX_SEARCH_MICRO_BATCH
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def estimate_inputs(inputs: Inputs, *, gpu_total_bytes: int | None = None, target_utilization: float = 0.85,
                    history: Iterable[Any] = ()) -> Estimate:
    """The estimate for already-built inputs (the calibration tests build them from measurements)."""
    correction = correction_from_history(inputs, history)
    phases, peak = _peak_of(inputs, correction)
    notes = list(inputs.notes) + list(phases.notes)
    breakdown = {k: float(phases.breakdown.get(k, 0.0)) for k in BREAKDOWN_KEYS}
    phase_totals = {"forward_backward": phases.fb_total, "optimizer_step": phases.step_total}
    source = "formula"
    if correction is not None:
        source = correction.source
        notes.extend(correction.notes)
        # Show the corrected figure in the breakdown: the measured runs rescale activations/logits.
        delta = peak - phases.peak
        if phases.peak_phase == "forward_backward":
            phase_totals["forward_backward"] = peak
        moved = breakdown["activations"] + breakdown["logits"]
        if moved > 0:
            scale = max(0.0, (moved + delta) / moved)
            breakdown["activations"] *= scale
            breakdown["logits"] *= scale
        else:
            breakdown["workspace"] += delta
    # Before the first optimizer step no optimizer states exist; after it (steady state) they do.
    phase_totals["first_step"] = max(phase_totals["forward_backward"] - phases.forward_backward.get("optimizer", 0.0),
                                     phases.step_total)
    phase_totals["steady_state"] = max(phase_totals["forward_backward"], phases.step_total)
    if phases.load:
        phase_totals[LOAD] = sum(phases.load.values())
        if phases.peak_phase == LOAD:
            notes.append(load_note(load_library(inputs.setup), phases.load["workspace"]))
    ints = {k: round(v) for k, v in breakdown.items()}
    peak_int = sum(ints.values())
    context, slack, beside = _overhead(peak_int, phases, inputs)
    if beside:
        notes.append(fsdp.reserved_note(beside))
    per_sample = per_sample_activation_bytes_for(inputs)
    if correction is not None:
        per_sample *= correction.per_sample_scale
    return Estimate(
        peak_bytes=peak_int,
        breakdown=ints,
        max_micro_batch_size=max_micro_batch_size(inputs, gpu_total_bytes, target_utilization, correction),
        phases={k: round(v) for k, v in phase_totals.items()},
        peak_phase=phases.peak_phase,
        source=source,
        notes=notes,
        context_bytes=context,
        slack_bytes=slack,
        gpu_total_bytes=int(gpu_total_bytes) if gpu_total_bytes else None,
        target_utilization=target_utilization,
        micro_batch_size=inputs.setup.micro_batch_size,
        per_sample_bytes=round(per_sample),
        inputs=_describe(inputs),
    )


def _describe(inputs: Inputs) -> dict:
    shape, setup = inputs.shape, inputs.setup
    return {
        "params": int(shape.params), "layers": shape.layers, "hidden": shape.hidden, "heads": shape.heads,
        "kv_heads": shape.kv_heads, "ffn": shape.ffn, "vocab": shape.vocab, "gated_mlp": shape.gated_mlp,
        "tied_embeddings": shape.tied_embeddings, "arch": shape.arch,
        "micro_batch_size": setup.micro_batch_size, "max_seq_len": setup.seq_len,
        "gradient_accumulation_steps": setup.gradient_accumulation_steps,
        "gradient_checkpointing": setup.gradient_checkpointing, "precision": setup.precision,
        "zero_stage": setup.sharding_stage, "world_size": setup.world_size, "optimizer": setup.optimizer,
        "lora_rank": setup.lora_rank, "lora_targets": list(setup.lora_targets) if setup.lora_rank else [],
        "quantization": setup.quantization, "attention": setup.attention,
        "offload_optimizer": setup.offload_optimizer, "offload_params": setup.offload_params,
        "max_target_len": setup.target_len or None, "tensor_parallel": setup.tensor_parallel,
        "pipeline_parallel": setup.pipeline_parallel, "context_parallel": setup.context_parallel,
    }


def estimate(profile: Any, *, gpu_total_bytes: int | None = None, history: Iterable[Any] = ()) -> Estimate:
    """Estimate a profile's peak memory per GPU.

    ``gpu_total_bytes`` (the card's capacity) enables ``max_micro_batch_size``; when None the
    profile's ``[gpu] memory_gib`` is used if set. ``history`` takes ``RunRecord``s of the same
    profile; those with a measured peak correct the estimate.
    """
    inputs = zero_settings.with_job_settings(inputs_from_profile(profile), profile)
    if gpu_total_bytes is None and getattr(profile, "gpu", None) and profile.gpu.get("memory_gib"):
        gpu_total_bytes = int(float(profile.gpu["memory_gib"]) * 1024**3)
    return estimate_inputs(inputs, gpu_total_bytes=gpu_total_bytes,
                           target_utilization=float(getattr(profile, "target_utilization", 0.85)),
                           history=history)


def estimate_with(profile: Any, changes: Mapping[str, Any], *, gpu_total_bytes: int | None = None,
                  history: Iterable[Any] = ()) -> Estimate:
    """The estimate after the ladder's knob changes (``{knob: new}`` or ``{knob: [old, new]}``)."""
    flat = {k: (v[1] if isinstance(v, (list, tuple)) and len(v) == 2 else v) for k, v in changes.items()}
    return estimate(profile.with_train(flat), gpu_total_bytes=gpu_total_bytes, history=history)


def per_sample_activation_bytes(profile: Any, history: Iterable[Any] = ()) -> int:
    """Bytes one more sequence in the micro batch adds (activations + logits), for the ladder."""
    inputs = zero_settings.with_job_settings(inputs_from_profile(profile), profile)
    value = per_sample_activation_bytes_for(inputs)
    correction = correction_from_history(inputs, history)
    if correction is not None:
        value *= correction.per_sample_scale
    return round(value)
