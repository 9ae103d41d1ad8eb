"""Free memory on each of the job's GPUs vs what the job needs (profile or estimate)."""

from __future__ import annotations

from collections.abc import Sequence

from gpudoc.checks._common import (
    CheckContext,
    free_bytes,
    gpu_list,
    has_profile,
    mig_enabled,
    procs_per_node,
    profile_name,
    target_gpus,
)
from gpudoc.facts.holders import GpuHolder, classify_gpu_processes
from gpudoc.facts.model import Facts, Gpu
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile
from gpudoc.units import GIB, format_bytes

FREE_MEMORY = "gpu.free-memory"

TIGHT_MARGIN = 1.05  # within 5 % of the need: an allocator spike or a CUDA context tips it over
BUSY_SHARE = 0.5  # with no stated need, a GPU more than half used is worth a warning


def _estimated_need(ctx: CheckContext) -> int | None:
    est = ctx.estimate
    if est is None or not getattr(est, "peak_bytes", None):
        return None
    # peak_bytes predicts max_memory_allocated; the card must also hold the CUDA context and the
    # allocator's slack, which total_bytes adds.
    return int(getattr(est, "total_bytes", None) or est.peak_bytes)


def _need(profile: Profile, ctx: CheckContext) -> tuple[int | None, str]:
    candidates: list[tuple[int, str]] = []
    if has_profile(profile) and profile.gpu.get("min_free_gib") is not None:
        candidates.append((int(float(profile.gpu["min_free_gib"]) * GIB),
                           f"gpu.min_free_gib in {profile_name(profile, ctx)}"))
    estimated = _estimated_need(ctx)
    if estimated is not None:
        candidates.append((estimated, f"gpudoc estimate ({getattr(ctx.estimate, 'source', None) or 'estimate'})"))
    if not candidates:
        return None, ""
    return max(candidates, key=lambda c: c[0])


def _usable(gpu: Gpu) -> tuple[int | None, int | None, str]:
    """(free, total, note): a MIG GPU's job runs inside one instance, so its largest instance counts."""
    if mig_enabled(gpu):
        devices = [d for d in (gpu.mig or {}).get("devices") or [] if isinstance(d, dict)]
        best = None
        for d in devices:
            free = d.get("memory_free_bytes")
            if free is None and d.get("memory_total_bytes") is not None and d.get("memory_used_bytes") is not None:
                free = d["memory_total_bytes"] - d["memory_used_bytes"]
            if free is not None and (best is None or free > best[0]):
                best = (free, d.get("memory_total_bytes"))
        if best is not None:
            return best[0], best[1], " (largest MIG instance)"
    return free_bytes(gpu), gpu.memory_total_bytes, ""


def freeing_helps(facts: Facts, profile: Profile, ctx: CheckContext) -> bool:
    """Whether memory others free can let the job start: a need is stated and every GPU of the job
    holds at least that much (a card too small stays too small, however long one waits)."""
    need, _ = _need(profile, ctx)
    totals = [_usable(g)[1] for g in target_gpus(facts, profile, ctx)]
    return need is not None and bool(totals) and all(t is not None and t >= need for t in totals)


def lacks_free_memory(facts: Facts, profile: Profile, ctx: CheckContext) -> bool:
    """Whether a GPU of the job has less free memory than the job needs (what ``check_free_memory``
    fails), and memory others free could fix it (``freeing_helps``)."""
    need, _ = _need(profile, ctx)
    if need is None or not freeing_helps(facts, profile, ctx):
        return False
    return any((free := _usable(g)[0]) is not None and free < need for g in target_gpus(facts, profile, ctx))


def freest_gpus(facts: Facts, profile: Profile, ctx: CheckContext) -> tuple[Gpu, ...] | None:
    """When the job uses fewer GPUs than the machine has: that many, those with the most free memory,
    each with what the job needs and a UUID to name it by (NVML and CUDA number GPUs differently);
    None when the job takes every GPU, states no need, or too few GPUs have the memory."""
    count, (need, _) = procs_per_node(profile), _need(profile, ctx)
    if not count or need is None or count >= len(facts.gpus):
        return None
    fitting = [g for g in facts.gpus if g.uuid and (_usable(g)[0] or 0) >= need * TIGHT_MARGIN]
    fitting.sort(key=lambda g: -(_usable(g)[0] or 0))
    return tuple(sorted(fitting[:count], key=lambda g: g.index)) if len(fitting) >= count else None


def _better_gpus(facts: Facts, need: int, exclude: set[int], count: int) -> list[int]:
    good = [g.index for g in sorted(facts.gpus, key=lambda g: -(free_bytes(g) or 0))
            if g.index not in exclude and (free_bytes(g) or 0) >= need]
    return sorted(good[:count])


def check_free_memory(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    gpus = target_gpus(facts, profile, ctx)
    if not gpus:
        return [Finding(FREE_MEMORY, Severity.SKIP, "no GPU selected for the job", "see gpu.visible",
                        "gpudoc check --only gpu.visible")]
    need, source = _need(profile, ctx)
    holders = classify_gpu_processes(facts, gpus=[g.index for g in gpus])
    out: list[Finding] = []
    fine: list[tuple[int, int]] = []
    unknown: list[int] = []
    for gpu in gpus:
        free, total, note = _usable(gpu)
        if free is None:
            unknown.append(gpu.index)
            continue
        mine = [h for h in holders if h.gpu_index == gpu.index]
        held = tuple(h.describe() for h in mine[:4])
        used_detail = f"total {format_bytes(total)}, free {format_bytes(free)}{note}" + "".join(f"; {h}" for h in held)
        affects = (f"gpu:{gpu.index}",)
        if need is not None and free < need * TIGHT_MARGIN:
            severity = Severity.FAIL if free < need else Severity.WARN
            title = (f"GPU {gpu.index}: {format_bytes(free)} free{note}, the job needs {format_bytes(need)} "
                     f"({source})")
            out.append(Finding(FREE_MEMORY, severity, title, used_detail,
                               _remedy(facts, gpu, total, need, mine, gpus, profile, ctx), affects, holders=held))
        elif need is None and total and free < total * BUSY_SHARE:
            title = f"GPU {gpu.index}: only {format_bytes(free)} of {format_bytes(total)} free{note}"
            out.append(Finding(FREE_MEMORY, Severity.WARN, title, used_detail + "; no need stated: "
                               "set gpu.min_free_gib in the profile or pass an estimate",
                               _remedy(facts, gpu, total, total * BUSY_SHARE, mine, gpus, profile, ctx), affects,
                               holders=held))
        else:
            fine.append((gpu.index, free))
    if fine:
        least = min(f for _, f in fine)
        against = f", the job needs {format_bytes(need)} ({source})" if need is not None else ""
        out.append(Finding(FREE_MEMORY, Severity.OK,
                           f"GPU {gpu_list(i for i, _ in fine)}: at least {format_bytes(least)} free{against}"))
    if unknown:
        out.append(Finding(FREE_MEMORY, Severity.SKIP, f"GPU {gpu_list(unknown)}: free memory N/A (not reported)",
                           "the source does not report memory for this GPU",
                           f"nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv -i {gpu_list(unknown)}",
                           tuple(f"gpu:{i}" for i in unknown)))
    return out


def _remedy(facts: Facts, gpu: Gpu, total: int | None, need: float, holders: list[GpuHolder], gpus: Sequence[Gpu],
            profile: Profile, ctx: CheckContext) -> str:
    if total is not None and total < need:
        return _card_too_small(facts, total, profile, ctx)
    if any(h.own for h in holders):
        return f"gpudoc clean --gpus {gpu.index}"
    keep = [g.index for g in gpus if g.index != gpu.index and (_usable(g)[0] or 0) >= need]
    missing = len(gpus) - len(keep)
    others = _better_gpus(facts, int(need), {g.index for g in gpus}, missing)
    if others and len(others) == missing:
        return f"export CUDA_VISIBLE_DEVICES={gpu_list(sorted(keep + others))}  # GPUs with enough free memory"
    if holders:
        return holders[0].remedy()
    return f"nvidia-smi -i {gpu.index}  # see who holds the memory"


def _card_too_small(facts: Facts, total: int, profile: Profile, ctx: CheckContext) -> str:
    """What to change when no amount of freeing memory helps. `gpudoc estimate` is named only when
    it answers for this profile (the check got an estimate): without a [model] it exits 2."""
    label = profile_name(profile, ctx)
    card = f"the card holds {format_bytes(total)}"
    estimated = _estimated_need(ctx)
    if estimated is not None and estimated <= total:
        # The job fits the card; only the profile's floor was written for a bigger one.
        return f"{card} and the job needs about {format_bytes(estimated)}: lower min_free_gib in [gpu] of {label}"
    if estimated is not None and getattr(ctx.estimate, "max_micro_batch_size", None) == 0:
        # Not even one sample fits: a smaller micro batch is no answer.
        return (f"{card}, too little even for micro_batch_size 1: gradient checkpointing, LoRA or a shorter "
                f"max_seq_len in {label} (`gpudoc estimate -p {label}` shows what takes the memory)")
    if estimated is not None:
        return (f"{card}: lower micro_batch_size in [train] of {label} "
                f"(`gpudoc estimate -p {label}` shows the largest that fits)")
    new = "gpudoc profile new NAME --from-gpu" + (" --snapshot FILE" if facts.source.startswith("snapshot") else "")
    sizing = (f"complete {label} until `gpudoc estimate -p {label}` answers (it names what is missing)"
              if has_profile(profile) and profile.model else f"add [model] to {label} so `gpudoc estimate` can size the job")
    return f"{card}, less than min_free_gib in [gpu] of {label}: run a smaller job with a profile for this card (`{new}`), or {sizing}"
