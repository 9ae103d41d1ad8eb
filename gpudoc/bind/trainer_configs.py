"""The trainers' own config presets: axolotl, LLaMA-Factory, torchtune, accelerate, NeMo and nanoGPT."""

from __future__ import annotations

from typing import Any

from gpudoc.bind.filecontext import MISSING, FileContext, FileResult, count, get, num


# -- axolotl YAML ---------------------------------------------------------------------------------
def _precision_bools(res: FileResult, data: Any, ctx: FileContext, tool: str,
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


def _follow_deepspeed(res: FileResult, data: Any, ctx: FileContext, tool: str) -> None:
    path = get(data, ("deepspeed",))
    if isinstance(path, str) and path:
        res.follow.append((path, "deepspeed", True))
        return
    res.unsupported(ctx.knobs, ("zero_stage", "offload_optimizer", "offload_params"), lambda knob: (
        f"{tool} ({ctx.name}): {knob} goes through the DeepSpeed JSON named by 'deepspeed:', which is not set"))


def _lora(res: FileResult, data: Any, ctx: FileContext, key: str) -> None:
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


def axolotl_write(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    for knob, key in (("micro_batch_size", "micro_batch_size"),
                      ("gradient_accumulation_steps", "gradient_accumulation_steps"),
                      ("max_seq_len", "sequence_len")):
        if knob in k:
            res.set((key,), int(k[knob]), knob)
    gc = k.get("gradient_checkpointing")
    if gc is not None:
        if isinstance(gc, bool):
            if gc or get(data, ("gradient_checkpointing",)) is not MISSING:
                res.set(("gradient_checkpointing",), gc, "gradient_checkpointing")
            res.expressed.add("gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = f"axolotl: gradient_checkpointing is true/false, not '{gc}'"
    _precision_bools(res, data, ctx, "axolotl")
    _lora(res, data, ctx, "lora_r")
    _follow_deepspeed(res, data, ctx, "axolotl")
    return res


def axolotl_read(data: Any) -> dict[str, Any]:
    return _read_simple(data, {"micro_batch_size": "micro_batch_size",
                               "gradient_accumulation_steps": "gradient_accumulation_steps",
                               "max_seq_len": "sequence_len", "lora_rank": "lora_r"},
                        bools={"gradient_checkpointing": "gradient_checkpointing"})


def _read_simple(data: Any, ints: dict[str, str], bools: dict[str, str] | None = None) -> dict[str, Any]:
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


# -- LLaMA-Factory YAML ---------------------------------------------------------------------------
def llama_factory_write(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    for knob, key in (("micro_batch_size", "per_device_train_batch_size"),
                      ("gradient_accumulation_steps", "gradient_accumulation_steps"),
                      ("max_seq_len", "cutoff_len")):
        if knob in k:
            res.set((key,), int(k[knob]), knob)
    gc = k.get("gradient_checkpointing")
    if gc is not None:
        # LLaMA-Factory checkpoints by default; the file can only switch it off.
        if isinstance(gc, bool):
            if not gc or get(data, ("disable_gradient_checkpointing",)) is not MISSING:
                res.set(("disable_gradient_checkpointing",), not gc, "gradient_checkpointing")
            res.expressed.add("gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = f"llama-factory: no setting for gradient_checkpointing = '{gc}'"
    _precision_bools(res, data, ctx, "llama-factory", true_key="pure_bf16")
    _lora(res, data, ctx, "lora_rank")
    _follow_deepspeed(res, data, ctx, "llama-factory")
    return res


def llama_factory_read(data: Any) -> dict[str, Any]:
    out = _read_simple(data, {"micro_batch_size": "per_device_train_batch_size",
                              "gradient_accumulation_steps": "gradient_accumulation_steps",
                              "max_seq_len": "cutoff_len", "lora_rank": "lora_rank"})
    if isinstance(get(data, ("disable_gradient_checkpointing",)), bool):
        out["gradient_checkpointing"] = not get(data, ("disable_gradient_checkpointing",))
    return out


# -- torchtune YAML --------------------------------------------------------------------------------
def torchtune_write(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    for knob, path in (("micro_batch_size", ("batch_size",)),
                       ("gradient_accumulation_steps", ("gradient_accumulation_steps",)),
                       ("max_seq_len", ("tokenizer", "max_seq_len"))):
        if knob == "gradient_accumulation_steps" and int(k.get(knob) or 1) > 1 and \
                get(data, ("optimizer_in_bwd",)) is True:
            # The optimizer steps inside backward, per parameter: torchtune's recipes raise
            # "Gradient accumulation is not supported with optimizer in bwd" at startup.
            res.cannot[knob] = (f"torchtune ({ctx.name}): optimizer_in_bwd: True allows no gradient accumulation, "
                                f"and the profile asks for {k[knob]}; set optimizer_in_bwd: False in it, or keep "
                                "gradient_accumulation_steps = 1")
        elif knob in k:
            res.set(path, int(k[knob]), knob)
    gc = k.get("gradient_checkpointing")
    if gc is not None:
        if isinstance(gc, bool):
            res.set(("enable_activation_checkpointing",), gc, "gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = f"torchtune: enable_activation_checkpointing is True/False, not '{gc}'"
    prec = k.get("precision")
    if prec is not None:
        if prec in ("bf16", "bf16-true", "fp32"):
            res.set(("dtype",), "fp32" if prec == "fp32" else "bf16", "precision")
        else:
            res.cannot["precision"] = f"torchtune: dtype takes bf16 or fp32, not '{prec}'"
    if "lora_rank" in k:
        if get(data, ("model", "lora_rank")) is not MISSING:
            _lora_nested(res, data, ctx)
        elif k["lora_rank"]:
            res.cannot["lora_rank"] = f"torchtune ({ctx.name}): the model has no lora_rank (not a LoRA recipe config)"
        else:
            res.expressed.add("lora_rank")
    if "offload_params" in k:
        if k["offload_params"] or get(data, ("fsdp_cpu_offload",)) is not MISSING:
            res.set(("fsdp_cpu_offload",), bool(k["offload_params"]), "offload_params")
        res.expressed.add("offload_params")
    res.unsupported(k, ("zero_stage", "offload_optimizer"),
                    lambda knob: f"torchtune: no setting for {knob} (FSDP, not DeepSpeed)")
    return res


def _lora_nested(res: FileResult, data: Any, ctx: FileContext) -> None:
    rank = int(ctx.knobs["lora_rank"])
    if rank == 0:
        res.conflicts.append(f"{ctx.name}: model.lora_rank is set (LoRA recipe) but the profile says lora_rank = 0")
        res.expressed.add("lora_rank")
    else:
        res.set(("model", "lora_rank"), rank, "lora_rank")


def torchtune_read(data: Any) -> dict[str, Any]:
    out = _read_simple(data, {"micro_batch_size": "batch_size", "gradient_accumulation_steps":
                              "gradient_accumulation_steps", "max_seq_len": "tokenizer.max_seq_len",
                              "lora_rank": "model.lora_rank"},
                       bools={"gradient_checkpointing": "enable_activation_checkpointing"})
    out.pop("precision", None)
    dtype = get(data, ("dtype",))
    if dtype in ("bf16", "fp32"):
        out["precision"] = dtype
    return out


# -- accelerate config YAML (``accelerate launch --config_file``) --------------------------------
ACCELERATE_MIXED = {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}


def accelerate_write(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    is_ds = str(get(data, ("distributed_type",))).upper() == "DEEPSPEED"
    is_fsdp = str(get(data, ("distributed_type",))).upper() == "FSDP"
    prec = k.get("precision")
    if prec is not None:
        if prec in ACCELERATE_MIXED:
            res.set(("mixed_precision",), ACCELERATE_MIXED[prec], "precision")
        else:
            res.cannot["precision"] = f"accelerate ({ctx.name}): mixed_precision has no '{prec}'"
    if is_ds:
        ds = ("deepspeed_config",)
        if get(data, (*ds, "deepspeed_config_file")) not in (MISSING, None, ""):
            res.follow.append((str(get(data, (*ds, "deepspeed_config_file"))), "deepspeed", True))
        else:
            if "gradient_accumulation_steps" in k:
                res.set((*ds, "gradient_accumulation_steps"), int(k["gradient_accumulation_steps"]),
                        "gradient_accumulation_steps")
            if "zero_stage" in k:
                res.set((*ds, "zero_stage"), int(k["zero_stage"]), "zero_stage")
            for knob, key in (("offload_optimizer", "offload_optimizer_device"),
                              ("offload_params", "offload_param_device")):
                if knob in k:
                    res.set((*ds, key), "cpu" if k[knob] else "none", knob)
    elif is_fsdp and "offload_params" in k:
        res.set(("fsdp_config", "fsdp_offload_params"), bool(k["offload_params"]), "offload_params")
    processes = num(get(data, ("num_processes",)))
    machines = num(get(data, ("num_machines",))) or 1
    if processes is not None and processes != ctx.world_size:
        res.conflicts.append(f"{ctx.name}: num_processes = {processes} (all machines: {machines}) but the profile's "
                             f"world size is {ctx.world_size}")
    return res


def accelerate_read(data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mixed = get(data, ("mixed_precision",))
    if mixed in ("no", "fp16", "bf16"):
        out["precision"] = {"no": "fp32"}.get(mixed, mixed)
    if str(get(data, ("distributed_type",))).upper() == "DEEPSPEED":
        ds = get(data, ("deepspeed_config",))
        stage = count(get(ds, ("zero_stage",)))
        if stage is not None:
            out["zero_stage"] = stage
        accum = count(get(ds, ("gradient_accumulation_steps",)))
        if accum is not None:
            out["gradient_accumulation_steps"] = accum
        for knob, key in (("offload_optimizer", "offload_optimizer_device"), ("offload_params", "offload_param_device")):
            v = get(ds, (key,))
            if isinstance(v, str):
                out[knob] = v.lower() != "none"
    return out


# -- NeMo (Megatron GPT) YAML ---------------------------------------------------------------------
NEMO_PRECISION = {"fp32": 32, "fp16": 16, "bf16": "bf16", "bf16-true": "bf16-true", "fp16-true": "16-true"}


def nemo_write(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    if "micro_batch_size" in k:
        res.set(("model", "micro_batch_size"), int(k["micro_batch_size"]), "micro_batch_size")
    if "gradient_accumulation_steps" in k:
        # NeMo derives accumulation from global / (micro x data-parallel size).
        micro = int(k.get("micro_batch_size") or num(get(data, ("model", "micro_batch_size"))) or 1)
        res.set(("model", "global_batch_size"), micro * int(k["gradient_accumulation_steps"]) * ctx.world_size,
                "gradient_accumulation_steps")
    if "max_seq_len" in k:
        res.set(("model", "encoder_seq_length"), int(k["max_seq_len"]), "max_seq_len")
    if "precision" in k:
        # Lightning reads 16/32 or a string ("bf16"): a number may become a string here.
        res.set(("trainer", "precision"), NEMO_PRECISION[k["precision"]], "precision", any_type=True)
    gc = k.get("gradient_checkpointing")
    if gc is not None:
        gran = "selective" if gc == "selective" else "full" if gc else None
        # null switches checkpointing off, whatever granularity the file named.
        res.set(("model", "activations_checkpoint_granularity"), gran, "gradient_checkpointing", any_type=True)
        if gran == "full":
            res.set(("model", "activations_checkpoint_method"), "uniform", "gradient_checkpointing")
            res.set(("model", "activations_checkpoint_num_layers"), 1, "gradient_checkpointing")
    res.unsupported(k, ("zero_stage", "offload_optimizer", "offload_params", "lora_rank"),
                    lambda knob: f"nemo ({ctx.name}): no setting for {knob} in this preset")
    return res


def nemo_read(data: Any) -> dict[str, Any]:
    out = _read_simple(data, {"micro_batch_size": "model.micro_batch_size", "max_seq_len": "model.encoder_seq_length"})
    out.pop("precision", None)
    return out


# -- nanoGPT Python config ------------------------------------------------------------------------
def nanogpt_write(data: Any, ctx: FileContext) -> FileResult:
    # Here, not at the top: the framework's module reads jobs through this package.
    from gpudoc.frameworks.nanogpt import settings as nanogpt_settings

    res = FileResult()
    for key, value, knob in nanogpt_settings(ctx.knobs, ctx.world_size, res):
        res.set((key,), value, knob)
    return res


def nanogpt_read(data: Any) -> dict[str, Any]:
    return _read_simple(data, {"micro_batch_size": "batch_size", "max_seq_len": "block_size"})
