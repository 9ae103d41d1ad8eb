"""The rungs of the tuning ladder, in the SPEC's default order.

Each rung is a pure function of the ``Context`` returning a ``Suggestion`` when it applies to this
profile and failure, or a ``Skipped`` saying why not. A rung only ever changes knobs the profile
declares in ``[train]``: gpudoc cannot change what the job does not read.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Union

from gpudoc import allocator
from gpudoc.ladder.context import Context, nice_seq_len
from gpudoc.ladder.model import Skipped, Suggestion
from gpudoc.profiles.model import UserRung
from gpudoc.units import format_bytes

Outcome = Union[Suggestion, Skipped]

MICRO = "micro_batch_size"
ACCUM = "gradient_accumulation_steps"


def _not_declared(rung: str, knob: str) -> Skipped:
    return Skipped(rung, f"{knob} is not declared in [train]")


# -- 1. expandable-segments -------------------------------------------------------------------

def expandable_segments(ctx: Context) -> Outcome:
    rung = "expandable-segments"
    backend = ctx.diagnosis.backend
    if backend not in (None, "cuda", "hip"):
        return Skipped(rung, f"the {backend} backend has no PyTorch caching allocator setting")
    name = ctx.alloc_env_name()
    env = ctx.environment()
    for source, values in (("the profile's [env]", ctx.profile.env), ("the environment", env)):
        for var in (name, *allocator.NAMES):
            if allocator.is_expandable(values.get(var)) and (var == name or name not in values):
                return Skipped(rung, f"{var}=...expandable_segments:True is already set in {source}")
    current = ctx.profile.env.get(name) or env.get(name)
    if current is None:
        # Keep the user's other allocator options (max_split_size_mb, ...) written under the other name.
        current = next((ctx.profile.env.get(v) or env.get(v) for v in allocator.NAMES if ctx.profile.env.get(v) or env.get(v)), None)
    frag = ctx.diagnosis.reserved_unallocated_bytes
    requested = ctx.diagnosis.requested_bytes
    total = ctx.diagnosis.total_bytes
    fragmented = frag is not None and frag > 0 and (
        (requested is not None and frag >= requested) or (total is not None and frag >= 0.05 * total)
    )
    if fragmented:
        why = (
            f"{format_bytes(frag)} was reserved by PyTorch but unallocated when the allocation failed: "
            "fragmentation; expandable segments let the allocator grow and reuse segments instead "
            "of needing one free block of the requested size"
        )
    else:
        why = (
            "the allocator setting is not set; expandable segments cut fragmentation at no cost to "
            "the experiment"
        )
    value = allocator.with_expandable(current)
    env = {name: value}
    # A second allocator variable left in the profile would disagree with the one we set.
    env.update({var: value for var in allocator.NAMES if var != name and var in ctx.profile.env})
    return Suggestion(rung, {}, env, False, int(frag) if frag is not None else None, why)


# -- 2. free-stray-memory ---------------------------------------------------------------------

def free_stray_memory(ctx: Context) -> Outcome:
    rung = "free-stray-memory"
    others = [(pid, size) for pid, size in ctx.diagnosis.other_processes if size > 0]
    if not others:
        return Skipped(rung, "no other process held memory on the GPU at the time of the OOM")
    held = sum(size for _, size in others)
    gpu = ctx.diagnosis.gpu_index
    pids = ", ".join(f"PID {pid} ({format_bytes(size)})" for pid, size in others[:5])
    where = f"GPU {gpu}" if gpu is not None else "the GPU"
    command = f"gpudoc clean --gpus {gpu}" if gpu is not None else "gpudoc clean"
    why = (
        f"other processes held {format_bytes(held)} on {where}: {pids}; run `{command}` "
        "(or `gpudoc run --clean`) before relaunching; torch.cuda.empty_cache() in a fresh process "
        "frees nothing another process holds"
    )
    return Suggestion(rung, {}, {}, False, held, why)


# -- 3. halve-micro-batch ---------------------------------------------------------------------

def split_global_batch(micro: int, accum: int | None, world: int, new_micro: int, *,
                       window_low: int | None = None) -> tuple[int, int | None, int]:
    """(new_micro, new_accum, new_global) keeping ``micro × accum × world`` exact when possible.

    Micro sizes from ``new_micro`` down to ``window_low`` are tried for an exact split; otherwise
    ``new_micro`` with the nearest accumulation.
    """
    accum = accum or 1
    global_batch = micro * accum * world
    low = window_low if window_low is not None else new_micro
    for candidate in range(new_micro, max(low, 1) - 1, -1):
        if global_batch % (candidate * world) == 0:
            return candidate, global_batch // (candidate * world), global_batch
    new_accum = max(1, round(global_batch / (new_micro * world)))
    return new_micro, new_accum, new_micro * new_accum * world


def _world_text(world: int) -> str:
    return f"{world} GPU" + ("s" if world != 1 else "")


def halve_micro_batch(ctx: Context) -> Outcome:
    rung = "halve-micro-batch"
    if not ctx.declared(MICRO):
        return _not_declared(rung, MICRO)
    micro = int(ctx.knobs[MICRO])
    if micro <= 1:
        return Skipped(rung, "micro_batch_size is already 1")
    world = ctx.profile.world_size
    has_accum = ctx.declared(ACCUM)
    accum = int(ctx.knobs.get(ACCUM) or 1)
    derives_accum = not has_accum and ctx.declared("global_batch_size")

    def plan(target: int) -> tuple[int, int | None, int]:
        # An exact global batch is worth a smaller micro batch: 45 × 5 = 225 goes to 15 × 15, not
        # 22 × 10 = 220 (the experiment changes; a micro batch a little smaller only costs speed).
        if has_accum:
            return split_global_batch(micro, accum, world, target, window_low=math.ceil(target / 2))
        return target, None, target * accum * world

    new_micro, new_accum, new_global = plan(micro // 2)
    saving = ctx.saving(_micro_changes(new_micro, new_accum))
    halvings = 1
    # One relaunch should fit: keep halving while the expected saving cannot cover the shortfall
    # with the target's headroom (8 -> 2 in one relaunch, not 8 -> 4 -> 2).
    needed = ctx.needed_bytes
    while needed is not None and saving is not None and saving < needed and new_micro > 1:
        candidate = plan(new_micro // 2)
        candidate_saving = ctx.saving(_micro_changes(candidate[0], candidate[1]))
        if candidate_saving is None:
            break
        new_micro, new_accum, new_global = candidate
        saving = candidate_saving
        halvings += 1

    changes: dict[str, list] = {MICRO: [micro, new_micro]}
    old_global = micro * accum * world
    what = "halves" if halvings == 1 else f"cuts to {new_micro}/{micro} of"
    why = f"{what} the activation memory held per step"
    if has_accum:
        changes[ACCUM] = [accum, new_accum]
        if new_global == old_global:
            why += (
                f"; {ACCUM} {accum} → {new_accum} keeps the global batch exact at {old_global} "
                f"({new_micro} × {new_accum} × {_world_text(world)})"
            )
        else:
            drift = (new_global - old_global) / old_global
            why += (
                f"; the global batch cannot stay exact: {old_global} is not a multiple of "
                f"{new_micro} × {_world_text(world)}, so it moves {old_global} → {new_global} "
                f"({drift:+.1%}) with {ACCUM} {accum} → {new_accum}"
            )
    elif derives_accum:
        why += f"; global_batch_size stays {ctx.knobs['global_batch_size']} (the job derives its accumulation from it)"
    else:
        why += (
            f"; {ACCUM} is not declared in [train], so the global batch falls {old_global} → {new_global} "
            "unless the job compensates"
        )
    if halvings > 1:
        why += f" (halved {halvings} times so that the expected saving covers the shortfall and the target's headroom)"
    return Suggestion(rung, changes, {}, False, saving, why)


def _micro_changes(new_micro: int, new_accum: int | None) -> dict:
    changes: dict[str, Any] = {MICRO: new_micro}
    if new_accum is not None:
        changes[ACCUM] = new_accum
    return changes


# -- 4. gradient-checkpointing ----------------------------------------------------------------

def gradient_checkpointing(ctx: Context) -> Outcome:
    rung = "gradient-checkpointing"
    knob = "gradient_checkpointing"
    if not ctx.declared(knob):
        return _not_declared(rung, knob)
    old = ctx.knobs[knob]
    if old is True:
        return Skipped(rung, "gradient_checkpointing is already on")
    why = (
        "recomputes activations in the backward pass instead of keeping them: less memory for "
        "about a third more compute per step; results are unchanged"
    )
    if old == "selective":
        why = "full checkpointing keeps fewer activations than selective checkpointing; " + why
    return Suggestion(rung, {knob: [old, True]}, {}, False, ctx.saving({knob: True}), why)


# -- 5. mixed-precision -----------------------------------------------------------------------

def mixed_precision(ctx: Context) -> Outcome:
    rung = "mixed-precision"
    if not ctx.declared("precision"):
        return _not_declared(rung, "precision")
    old = ctx.knobs["precision"]
    if old != "fp32":
        return Skipped(rung, f"precision is already {old}")
    bf16 = ctx.supports_bf16()
    new = "bf16" if bf16 is not False else "fp16"
    why = "activations in 16-bit halve their memory; master weights stay fp32 (mixed precision)"
    if bf16 is False:
        why += "; fp16 with loss scaling because this GPU (compute capability < 8.0) has no bf16"
    elif bf16 is None:
        why += "; use fp16 instead if the GPU predates Ampere (no bf16 below compute capability 8.0)"
    return Suggestion(rung, {"precision": [old, new]}, {}, False, ctx.saving({"precision": new}), why)


# -- 6. zero-stage ----------------------------------------------------------------------------

def zero_stage(ctx: Context) -> Outcome:
    rung = "zero-stage"
    if not ctx.declared("zero_stage"):
        return _not_declared(rung, "zero_stage")
    world = ctx.profile.world_size
    if world <= 1:
        return Skipped(rung, "ZeRO shards across processes; with world_size 1 it frees nothing")
    old = int(ctx.knobs["zero_stage"])
    if old >= 3:
        return Skipped(rung, "zero_stage is already 3")
    new = old + 1
    what = {1: "optimizer states", 2: "optimizer states and gradients", 3: "optimizer states, gradients and parameters"}[new]
    why = f"ZeRO-{new} shards the {what} across the {world} processes (more communication per step)"
    return Suggestion(rung, {"zero_stage": [old, new]}, {}, False, ctx.saving({"zero_stage": new}), why)


# -- 7./8. CPU offload ------------------------------------------------------------------------

def _host_ram_warning(ctx: Context, parts: tuple[str, ...], what: str) -> str:
    available = ctx.host_ram_available()
    per_gpu = None
    if ctx.savings is not None:
        per_gpu = ctx.savings.breakdown_part(*parts)
    if available is None or not per_gpu:
        return ""
    needed = per_gpu * ctx.ranks_per_host()
    if needed > available:
        return (
            f"; WARNING: host RAM is short: {what} of {ctx.ranks_per_host()} process(es) need about "
            f"{format_bytes(needed)} but only {format_bytes(available)} is available"
        )
    return f"; host RAM is enough ({format_bytes(needed)} needed, {format_bytes(available)} available)"


def offload_optimizer(ctx: Context) -> Outcome:
    rung = "offload-optimizer"
    knob = "offload_optimizer"
    if not ctx.declared(knob):
        return _not_declared(rung, knob)
    if ctx.knobs[knob] is True:
        return Skipped(rung, "offload_optimizer is already on")
    why = "keeps the optimizer states in host RAM and steps on the CPU: slower steps, less GPU memory"
    why += _host_ram_warning(ctx, ("optim",), "the optimizer states")
    return Suggestion(rung, {knob: [ctx.knobs[knob], True]}, {}, False, ctx.saving({knob: True}), why)


def offload_params(ctx: Context) -> Outcome:
    rung = "offload-params"
    knob = "offload_params"
    if not ctx.declared(knob):
        return _not_declared(rung, knob)
    if ctx.knobs[knob] is True:
        return Skipped(rung, "offload_params is already on")
    changes: dict[str, list] = {knob: [ctx.knobs[knob], True]}
    why = "keeps the parameters in host RAM and fetches them layer by layer: much slower steps"
    if ctx.declared("zero_stage") and int(ctx.knobs["zero_stage"]) < 3:
        # DeepSpeed offloads parameters only under ZeRO-3.
        changes["zero_stage"] = [ctx.knobs["zero_stage"], 3]
        why += "; parameter offload needs ZeRO-3"
    why += _host_ram_warning(ctx, ("weight", "param", "optim"), "the parameters and optimizer states")
    new = {k: v[1] for k, v in changes.items()}
    return Suggestion(rung, changes, {}, False, ctx.saving(new), why)


# -- 9./10. semantic rungs --------------------------------------------------------------------

def shorter_sequences(ctx: Context) -> Outcome:
    rung = "shorter-sequences"
    if not ctx.declared("max_seq_len"):
        return _not_declared(rung, "max_seq_len")
    old = int(ctx.knobs["max_seq_len"])
    new = nice_seq_len(old)
    if new >= old:
        return Skipped(rung, f"max_seq_len {old} cannot be shortened further")
    why = (
        f"cuts activation memory by about a quarter; changes the experiment: samples longer than "
        f"{new} tokens are truncated"
    )
    return Suggestion(rung, {"max_seq_len": [old, new]}, {}, True, ctx.saving({"max_seq_len": new}), why)


def smaller_lora_rank(ctx: Context) -> Outcome:
    rung = "smaller-lora-rank"
    if not ctx.declared("lora_rank"):
        return _not_declared(rung, "lora_rank")
    old = int(ctx.knobs["lora_rank"])
    if old <= 1:
        return Skipped(rung, "lora_rank is 0 (full fine-tune) or 1" if old <= 0 else "lora_rank is already 1")
    new = old // 2
    why = "halves the adapter's parameters, gradients and optimizer states; changes the model's capacity"
    return Suggestion(rung, {"lora_rank": [old, new]}, {}, True, ctx.saving({"lora_rank": new}), why)


# -- 11. user rungs ---------------------------------------------------------------------------

def user_rung(ctx: Context, spec: UserRung) -> Outcome:
    rung = spec.name
    if not ctx.declared(spec.knob):
        return _not_declared(rung, spec.knob)
    old = ctx.knobs[spec.knob]
    if spec.op == "set":
        new = spec.value
    elif isinstance(old, bool) or not isinstance(old, (int, float)):
        return Skipped(rung, f"op '{spec.op}' needs a number, {spec.knob} is {old!r}")
    elif spec.op == "halve":
        new = old // 2 if isinstance(old, int) else old / 2
    else:  # decrement
        new = old - 1
    floor = spec.min if spec.min is not None else (1 if isinstance(old, int) and spec.op != "set" else None)
    if floor is not None and isinstance(new, (int, float)) and not isinstance(new, bool) and new < floor:
        if isinstance(old, (int, float)) and old > floor:
            new = type(old)(floor)
        else:
            return Skipped(rung, f"{spec.knob} is already at its minimum {floor}")
    if new == old:
        return Skipped(rung, f"{spec.knob} is already {old!r}")
    saving = None
    if spec.saving_fraction is not None and ctx.savings is not None:
        activations = ctx.savings.breakdown_part("activation")
        if activations is not None:
            saving = int(activations * spec.saving_fraction)
    if saving is None:
        saving = ctx.saving({spec.knob: new})
        if saving == 0:
            saving = None  # the estimator does not model custom knobs
    why = f"user rung from [[ladder.rung]]: {spec.knob} {spec.op}"
    if spec.semantic:
        why += "; changes the experiment"
    return Suggestion(rung, {spec.knob: [old, new]}, {}, bool(spec.semantic), saving, why)


Rung = Callable[[Context], Outcome]

BUILTIN_RUNGS: tuple[tuple[str, Rung], ...] = (
    ("expandable-segments", expandable_segments),
    ("free-stray-memory", free_stray_memory),
    ("halve-micro-batch", halve_micro_batch),
    ("gradient-checkpointing", gradient_checkpointing),
    ("mixed-precision", mixed_precision),
    ("zero-stage", zero_stage),
    ("offload-optimizer", offload_optimizer),
    ("offload-params", offload_params),
    ("shorter-sequences", shorter_sequences),
    ("smaller-lora-rank", smaller_lora_rank),
)

RUNG_NAMES = tuple(name for name, _ in BUILTIN_RUNGS)
