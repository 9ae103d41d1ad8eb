"""What the frameworks' config-file writers share: keys read as they are, a LoRA rank key, precision as
two booleans, a DeepSpeed JSON the file names (each framework's own writer is its ``file_preset``)."""

from __future__ import annotations

from typing import Any

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.configvalues import MISSING, count, get, num


def precision_bools(res: FileResult, data: Any, ctx: FileContext, tool: str,
                    true_key: str | None = None) -> None:
    prec = ctx.knobs.get("precision")
    if prec is None:
        return
    if prec in ("bf16-true", "fp16-true") and not (prec == "bf16-true" and true_key):
        res.cannot["precision"] = f"{tool}: no setting for '{prec}'"
        return
    want = {"bf16": prec in ("bf16", "bf16-true"), "fp16": prec == "fp16"}
    for key, on in want.items():
        if get(data, (key,)) is not MISSING or on:
            res.set((key,), on, "precision")
    if true_key and (get(data, (true_key,)) is not MISSING or prec == "bf16-true"):
        res.set((true_key,), prec == "bf16-true", "precision")
    res.expressed.add("precision")


def follows_deepspeed(res: FileResult, data: Any, ctx: FileContext, tool: str) -> None:
    path = get(data, ("deepspeed",))
    if isinstance(path, str) and path:
        res.follow.append((path, "deepspeed", True))
        return
    res.unsupported(ctx.knobs, ("zero_stage", "offload_optimizer", "offload_params"), lambda knob: (
        f"{tool} ({ctx.name}): {knob} goes through the DeepSpeed JSON named by 'deepspeed:', which is not set"))


def lora_key(res: FileResult, data: Any, ctx: FileContext, key: str) -> None:
    if "lora_rank" not in ctx.knobs:
        return
    rank = int(ctx.knobs["lora_rank"])
    current = get(data, (key,))
    if rank == 0:
        if num(current):
            res.conflicts.append(f"{ctx.name}: {key} = {current} (LoRA) but the profile says lora_rank = 0 (full fine-tune)")
        res.expressed.add("lora_rank")
        return
    res.set((key,), rank, "lora_rank")


def read_simple(data: Any, ints: dict[str, str], bools: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for knob, key in ints.items():
        v = count(get(data, tuple(key.split("."))))
        if v is not None:
            out[knob] = v
    for knob, key in (bools or {}).items():
        v = get(data, tuple(key.split(".")))
        if isinstance(v, bool):
            out[knob] = v
    bf, fp = get(data, ("bf16",)), get(data, ("fp16",))
    if bf is True or fp is True or (bf is False and fp in (False, MISSING)):
        out["precision"] = "bf16" if bf is True else "fp16" if fp is True else "fp32"
    return out
