"""Text rendering of an ``Estimate``: the breakdown table the seed guides draw by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoc.units import format_bytes

if TYPE_CHECKING:
    from gpudoc.estimate.estimator import Estimate
    from gpudoc.output import Console

_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer": "optimizer states",
    "activations": "activations",
    "logits": "logits + loss",
    "workspace": "workspace",
    "temporaries": "temporaries",
}
_WHY = {
    "workspace": "casts, gathered shards, buckets, optimizer temporaries",
    "temporaries": "the optimizer step's own",
}
_STAGES = {"forward_backward": "forward/backward", "forward": "forward", "backward": "backward",
           "optimizer_step": "optimizer step"}


def render_estimate(est: Estimate, console: Console, *, profile_name: str = "", gpu_from: str | None = None) -> None:
    total = est.gpu_total_bytes

    def share(n: int) -> str:
        return f"{100 * n / total:5.1f}%" if total else ""

    phase = _STAGES.get(est.peak_phase, est.peak_phase)
    inputs = est.inputs
    console.print(console.style(f"Memory estimate for {profile_name}", "bold")
                  + f"  (micro batch {est.micro_batch_size} x {inputs.get('max_seq_len')} tokens, "
                  f"{inputs.get('precision')}, per GPU of {inputs.get('world_size')})")
    step = "first step" if est.peak_step == "first_step" else "steady state"
    console.print(f"  peak in the {phase} phase of the {step}; source: {est.source}")
    if est.versions:
        console.print("  simulated with " + ", ".join(f"{k} {v}" for k, v in est.versions.items() if k != "helper"))
    console.print("")
    width = 20
    console.print(f"  {'component':<{width}} {'size':>10}  {'of GPU':>6}")
    for key, value in est.breakdown.items():
        if value == 0 and key in ("workspace", "temporaries"):
            continue
        label = _LABELS.get(key, key)
        console.print(f"  {label:<{width}} {format_bytes(value):>10}  {share(value):>6}"
                      + (f"  ({_WHY[key]})" if key in _WHY and value else ""))
    console.print(f"  {'peak allocated':<{width}} {format_bytes(est.peak_bytes):>10}  {share(est.peak_bytes):>6}"
                  "  (predicts torch.cuda.max_memory_allocated)")
    overhead = est.context_bytes + est.slack_bytes
    console.print(f"  {'overhead':<{width}} {format_bytes(overhead):>10}  {share(overhead):>6}"
                  f"  (CUDA context {format_bytes(est.context_bytes)} + allocator slack {format_bytes(est.slack_bytes)})")
    console.print(console.style(f"  {'total on the GPU':<{width}} {format_bytes(est.total_bytes):>10}  "
                                f"{share(est.total_bytes):>6}", "bold"))
    console.print("")
    console.print(f"  one more sequence in the micro batch adds {format_bytes(est.per_sample_bytes)}")
    if total:
        budget = total * est.target_utilization
        console.print(f"  GPU: {format_bytes(total)} ({gpu_from or 'given'}), target utilisation "
                      f"{est.target_utilization:.0%} = {format_bytes(budget)}")
        if est.max_micro_batch_size:
            console.print(f"  largest micro_batch_size that fits: {est.max_micro_batch_size}")
        else:
            console.print(console.style("  even micro_batch_size = 1 does not fit: try gradient checkpointing, "
                                        "a ZeRO stage, LoRA or a shorter max_seq_len (`gpudoc fix`)", "red"))
        if est.fits is False:
            console.print(console.style(f"  the current micro_batch_size = {est.micro_batch_size} does not fit", "red"))
    else:
        console.print("  GPU capacity unknown: pass --gpu-memory GIB or set [gpu] memory_gib for the largest micro batch")
    for note in est.notes:
        console.print(console.style(f"  note: {note}", "dim"))
