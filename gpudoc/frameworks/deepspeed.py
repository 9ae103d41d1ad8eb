"""A native DeepSpeed script: one that hands DeepSpeed its JSON itself (``--deepspeed --deepspeed_config ds.json``).

Batch, accumulation, precision and ZeRO stage are the JSON's, and edits go there. A bare
``--deepspeed`` is not the HF Trainer's ``--deepspeed ds.json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.bind.values import is_neutral
from gpudoc.configvalues import MISSING, count, format_value, get, is_auto, num
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.presetfiles import read_preset_file
from gpudoc.job import recognise as source
from gpudoc.job.argv import JobCommand
from gpudoc.job.identity import world
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import flag_value

name = "deepspeed"
arg_names: tuple[str, ...] = ()
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()
_CONFIG_FLAGS = ("--deepspeed_config", "--deepscale_config")  # deepspeed.add_config_arguments


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    hit = flag_value(job.script_args, _CONFIG_FLAGS)
    return Recognition(True, f"{hit[0]}, DeepSpeed's own config argument") if hit is not None else None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    hit = flag_value(job.script_args, _CONFIG_FLAGS)
    if hit is None:
        return
    data = read_preset_file(r, cwd, hit[1], "deepspeed")
    if data is None:
        r.notes.append(f"deepspeed: {hit[0]} {hit[1]} not read")
        return
    parallel = model_parallel(job, cwd)
    r.launch.update(parallel)
    ranks = world(job).world_size
    data_parallel = ranks // math.prod(parallel.values()) if ranks else None
    for knob, value in derived_batch(data, data_parallel).items():
        r.set(knob, value, "file", "", hit[1])
    if data_parallel is None and count(get(data, ("train_batch_size",))) is not None \
            and "gradient_accumulation_steps" not in r.knobs:
        r.notes.append(f"deepspeed: {hit[1]} derives its accumulation from train_batch_size over the data-parallel "
                       "ranks, which the launcher counts at start (no --num_gpus): it stays unknown")


# The script's own flags that split the ranks into model-parallel groups (DeepSpeedExamples'
# pipeline example, Megatron-DeepSpeed): DeepSpeed's batch arithmetic counts the data-parallel ranks
# only, world size / (pipeline stages x tensor-parallel ranks) (its config's mpu world size).
_PARALLEL_FLAGS = (("pipeline_parallel", ("--pipeline-parallel-size", "--pipeline_parallel_size",
                                          "--pipeline-model-parallel-size", "--pipeline_model_parallel_size")),
                   ("tensor_parallel", ("--tensor-model-parallel-size", "--tensor_model_parallel_size")))


def model_parallel(job: JobCommand, cwd: Path) -> dict[str, int]:
    """The pipeline stages and tensor-parallel ranks the script's flags (or its parser's defaults, any
    spelling of the option: ``-p 2``) set, where more than 1."""
    options = source.argparse_options(job, cwd)
    out: dict[str, int] = {}
    for key, names in _PARALLEL_FLAGS:
        spellings = next((flags for flags, _ in options if set(flags) & set(names)), list(names))
        hit = flag_value(job.script_args, tuple(spellings))
        default = next((value for flags, value in options if flags is spellings), None)
        value = count(hit[1]) if hit is not None else count(default)
        if isinstance(value, int) and value > 1:
            out[key] = value
    return out


def derived_batch(data: Any, data_parallel: int | None) -> dict[str, int]:
    """The micro batch and accumulation DeepSpeed derives from the JSON's ``train_batch_size``
    (deepspeed/runtime/config.py, ``_set_batch_related_parameters``): any two of train_batch_size,
    train_micro_batch_size_per_gpu and gradient_accumulation_steps give the third over the data-parallel
    ranks; train_batch_size alone takes accumulation 1, a micro batch alone too."""
    tbs, micro, accumulation = (count(get(data, (key,))) for key in (
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    if accumulation is not None:
        if tbs is not None and micro is None and data_parallel:
            return {"micro_batch_size": tbs // data_parallel // accumulation}
        return {}
    if tbs is None:
        return {"gradient_accumulation_steps": 1} if micro is not None else {}
    if not data_parallel:
        return {}
    if micro is None:
        return {"micro_batch_size": tbs // data_parallel, "gradient_accumulation_steps": 1}
    return {"gradient_accumulation_steps": tbs // micro // data_parallel}


defaults = base.no_defaults
edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches


knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place


def resolved(settings: Mapping[str, Any]) -> base.Resolved:
    """The engine's config after DeepSpeed resolved it (the batch arithmetic done)."""
    return base.Resolved(base.counted(settings, {"micro_batch_size": "train_micro_batch_size_per_gpu",
                                                 "gradient_accumulation_steps": "gradient_accumulation_steps"}))


# -- its JSON (also the one the HF Trainer's --deepspeed and a YAML trainer's deepspeed: name) ---
def write_file(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs

    def hf_field(path: tuple[str, ...], value: Any, knob: str) -> None:
        current = get(data, path)
        if ctx.hf_mode and is_auto(current):
            res.expressed.add(knob)
            _left_auto(res, ctx, f"{'.'.join(path)} = \"auto\": the Trainer fills it from its own flag", knob, value)
        else:
            res.set(path, value, knob)

    if "micro_batch_size" in k:
        hf_field(("train_micro_batch_size_per_gpu",), int(k["micro_batch_size"]), "micro_batch_size")
    if "gradient_accumulation_steps" in k:
        hf_field(("gradient_accumulation_steps",), int(k["gradient_accumulation_steps"]), "gradient_accumulation_steps")
    if "zero_stage" in k:
        if get(data, ("zero_optimization",)) is MISSING and is_neutral("zero_stage", k["zero_stage"]):
            res.expressed.add("zero_stage")
        else:
            res.set(("zero_optimization", "stage"), int(k["zero_stage"]), "zero_stage")
    for knob, section, legacy in (("offload_optimizer", "offload_optimizer", "cpu_offload"),
                                  ("offload_params", "offload_param", "cpu_offload_params")):
        if knob not in k:
            continue
        on = bool(k[knob])
        if get(data, ("zero_optimization", legacy)) is not MISSING:
            res.set(("zero_optimization", legacy), on, knob)
        elif get(data, ("zero_optimization", section)) is not MISSING or on:
            res.set(("zero_optimization", section, "device"), "cpu" if on else "none", knob)
        else:
            res.expressed.add(knob)
    prec = k.get("precision")
    if prec is not None:
        if prec in ("bf16-true", "fp16-true"):
            res.cannot["precision"] = (f"deepspeed ({ctx.name}): bf16/fp16 modes keep fp32 master weights; "
                                       f"'{prec}' has no setting")
        else:
            want = {"bf16": prec == "bf16", "fp16": prec == "fp16"}
            for section, on in want.items():
                current = get(data, (section, "enabled"))
                if current is MISSING and not on:
                    continue
                if ctx.hf_mode and is_auto(current):
                    _left_auto(res, ctx, f"{section}.enabled = \"auto\": the Trainer sets it from --bf16/--fp16",
                               "precision", prec)
                    continue
                res.set((section, "enabled"), on, "precision")
            res.expressed.add("precision")
    # train_batch_size against micro x accumulation x world size is checked on the file as it will
    # be written, with the launch's other contradictions (startup_check).
    stage = k.get("zero_stage", get(data, ("zero_optimization", "stage")))
    stage_number = num(stage)
    if k.get("offload_params") and stage_number is not None and stage_number < 3:
        res.conflicts.append(f"{ctx.name}: offload_params needs ZeRO stage 3, the stage is {stage}")
    return res


def _left_auto(res: FileResult, ctx: FileContext, what: str, knob: str, value: Any) -> None:
    """An "auto" the Trainer fills from its own flag is left as it is: said, and a conflict where no
    flag carries the profile's value (the job would train with the command's or the Trainer's own)."""
    if knob in ctx.carried:
        res.notes.append(f"{ctx.name}: left {what}, which carries {knob} = {format_value(value)}")
    else:
        res.conflicts.append(f"{ctx.name}: left {what}, which no binding sets to {knob} = {format_value(value)}: "
                             "set [bind] args = \"hf-trainer\" to carry it")


def read_file(data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for knob, path in (("micro_batch_size", ("train_micro_batch_size_per_gpu",)),
                       ("gradient_accumulation_steps", ("gradient_accumulation_steps",)),
                       ("zero_stage", ("zero_optimization", "stage"))):
        v = count(get(data, path))
        if v is not None:
            out[knob] = v
    if get(data, ("zero_optimization", "stage")) is MISSING:
        out["zero_stage"] = 0  # DeepSpeed's default: a JSON that names no stage runs without ZeRO
    for knob, section, legacy in (("offload_optimizer", "offload_optimizer", "cpu_offload"),
                                  ("offload_params", "offload_param", "cpu_offload_params")):
        legacy_v = get(data, ("zero_optimization", legacy))
        device = get(data, ("zero_optimization", section, "device"))
        if isinstance(legacy_v, bool):
            out[knob] = legacy_v
        elif isinstance(device, str) and not is_auto(device):
            out[knob] = device.lower() in ("cpu", "nvme")
        elif legacy_v is MISSING and get(data, ("zero_optimization", section)) is MISSING \
                and out.get("zero_stage", 0) >= (2 if knob == "offload_optimizer" else 3):
            # No offload section under a stage that can offload: DeepSpeed's default, no offload
            # (so the offload rungs apply to any ZeRO-2/ZeRO-3 JSON).
            out[knob] = False
    bf, fp = get(data, ("bf16", "enabled")), get(data, ("fp16", "enabled"))
    if (isinstance(bf, bool) and isinstance(fp, bool)) or (bf is True or fp is True):
        out["precision"] = "bf16" if bf is True else "fp16" if fp is True else "fp32"
    return out


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """A DeepSpeed config: a ZeRO section or one of its batch keys."""
    return suffix != ".py" and ("zero_optimization" in data or "train_micro_batch_size_per_gpu" in data
                                or "train_batch_size" in data)


def startup_check(data: Any, label: str, knobs: Mapping[str, Any], world_size: int) -> str | None:
    """DeepSpeed asserts ``train_batch_size == micro x accumulation x world size`` at start-up, its world
    size the data-parallel ranks; checked on the file as it will be written (``"auto"`` values are filled
    by the Trainer, an accumulation nothing says is DeepSpeed's to derive)."""
    tbs = num(get(data, ("train_batch_size",)))
    micro = num(get(data, ("train_micro_batch_size_per_gpu",)))
    accum = num(get(data, ("gradient_accumulation_steps",)))
    micro = micro if micro is not None else num(knobs.get("micro_batch_size"))
    accum = accum if accum is not None else num(knobs.get("gradient_accumulation_steps"))
    if accum is None and tbs is not None and micro:
        # Neither the JSON nor the job says: DeepSpeed derives it, train_batch_size // micro // ranks
        # (deepspeed/runtime/config.py, _set_batch_related_parameters), then asserts the product.
        accum = max(1, int(tbs // micro // world_size))
    if tbs is None or micro is None or accum is None or micro * accum * world_size == tbs:
        return None
    product = micro * accum * world_size
    return (f"{label}: train_batch_size = {tbs} but micro batch x gradient accumulation x world size = "
            f"{micro} x {accum} x {world_size} = {product}; set train_batch_size to {product} (or \"auto\") "
            f"or change the profile")


# DeepSpeed reads its JSON itself, after the script's own flags: a key=value override beats nothing there.
file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout, command_overrides=False,
                                            startup_check=startup_check)
