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
    where = "while the model loads, before the first step" if est.peak_phase == "load" else \
        f"in the {phase} phase of the {step}"
    console.print(f"  peak {where}; source: {est.source}")
    _phases(est, console)
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
            console.print(f"  largest micro_batch_size within the target: {est.max_micro_batch_size}")
        else:
            console.print(console.style(f"  even micro_batch_size = 1 is above the target: {_levers(est)}", "red"))
        current = f"the current micro_batch_size = {est.micro_batch_size}"
        if est.fit == "above_target":
            console.print(console.style(
                f"  {current} fits the card ({format_bytes(est.total_bytes)} of {format_bytes(total)}) but is above "
                f"the target utilisation ({format_bytes(budget)}): little headroom for fragmentation and spikes",
                "yellow"))
        elif est.fit == "does_not_fit":
            console.print(console.style(f"  {current} does not fit the card: it needs {format_bytes(est.total_bytes)} "
                                        f"of {format_bytes(total)}", "red"))
    else:
        console.print("  GPU capacity unknown: pass --gpu-memory GIB or set [gpu] memory_gib for the largest micro batch")
    for note in est.notes:
        console.print(console.style(f"  note: {note}", "dim"))


def _phases(est: Estimate, console: Console) -> None:
    """The answers a peak can mean: a one-step benchmark stops before the optimizer states exist; a
    training run holds them from its second step on; a 4-bit model is quantized at load, before both.
    The largest is the peak the verdicts weigh."""
    first, steady = est.phases.get("first_step"), est.phases.get("steady_state")
    if first is None or steady is None:
        return
    peak = "load" if est.peak_phase == "load" else "first_step" if est.peak_step == "first_step" else "steady_state"
    rows = [("load", "load", "the 4-bit weights quantized on the GPU, before any step")] if "load" in est.phases else []
    rows += [("first_step", "first step", "no optimizer states yet: what a one-step benchmark measures"),
             ("steady_state", "steady state", "optimizer states allocated: every later step")]
    for key, label, why in rows:
        mark = "  <- the peak" if key == peak else ""
        console.print(f"  {label:<13} {format_bytes(est.phases[key]):>10}  ({why}){mark}")


def _levers(est: Estimate) -> str:
    """What is left to try, leaving out what the job already does (and ZeRO on one GPU)."""
    knobs = est.inputs
    levers = []
    if knobs.get("gradient_checkpointing") in (None, False, "none"):
        levers.append("gradient checkpointing")
    if int(knobs.get("world_size") or 1) > 1 and not knobs.get("zero_stage"):
        levers.append("a ZeRO stage")
    if not knobs.get("lora_rank"):
        levers.append("LoRA")
    if str(knobs.get("precision") or "fp32") == "fp32":
        levers.append("16-bit precision")
    levers.append("a shorter max_seq_len")
    return "try " + ", ".join(levers) + " (`gpudoc fix`)"
