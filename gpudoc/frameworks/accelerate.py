"""A script of its own under ``accelerate launch --config_file``: the config is all it says.

The config carries mixed precision, the DeepSpeed plugin and the process count; the HF Trainer and
the YAML-driven trainers read it too (``accelerate_config``), under their own knobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import MISSING, count, get, num
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.presetfiles import follow_deepspeed, read_preset_file
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading

name = "accelerate"
arg_names: tuple[str, ...] = ()  # a profile's `[bind] args = "accelerate"` is the Trainer's flags (hf_trainer)
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    if job.launcher == "accelerate" and job.options.get("--config_file"):
        return Recognition(False, "accelerate launch --config_file")
    return None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    accelerate_config(job, cwd, r, trainer=False)


def accelerate_config(job: JobCommand, cwd: Path, r: JobReading, *, trainer: bool) -> None:
    """``accelerate launch --config_file F``: mixed precision, the DeepSpeed plugin's stage and
    offload, and the processes it starts (its ``num_processes`` counts all machines). Under a
    Trainer (``trainer``) the accumulation is the Trainer's own, not the plugin's."""
    label = job.options.get("--config_file") if job.launcher == "accelerate" else None
    if not label:
        return
    data = read_preset_file(r, cwd, label, "accelerate", skip=("gradient_accumulation_steps",) if trainer else ())
    if data is None:
        r.notes.append(f"accelerate: --config_file {label} not read")
        return
    said, machines = count(get(data, ("num_processes",))), num(get(data, ("num_machines",))) or 1
    if isinstance(said, int) and not isinstance(said, bool) and said > 0 and machines > 0 and said % machines == 0:
        r.launch.update({"nproc_per_node": said // machines, "nnodes": machines})
    elif said is not None:  # accelerate would refuse it too: the world size is not guessed
        r.notes.append(f"{label}: num_processes = {said!r} is no count of processes over {machines} machine(s): "
                       "the world size was not read from it")
    plugin = get(data, ("deepspeed_config",))
    if str(get(data, ("distributed_type",))).upper() == "DEEPSPEED" and isinstance(plugin, Mapping):
        follow_deepspeed(r, cwd, label, plugin.get("deepspeed_config_file"), "deepspeed_config_file")


defaults = base.no_defaults
edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches
resolved = base.no_resolved
knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place


# -- its config file ---------------------------------------------------------------------------------
_MIXED = {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}


def write_file(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    is_ds = str(get(data, ("distributed_type",))).upper() == "DEEPSPEED"
    is_fsdp = str(get(data, ("distributed_type",))).upper() == "FSDP"
    prec = k.get("precision")
    if prec is not None:
        if prec in _MIXED:
            res.set(("mixed_precision",), _MIXED[prec], "precision")
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


def read_file(data: Any) -> dict[str, Any]:
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


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """An accelerate config file, as ``accelerate config`` writes it."""
    return suffix != ".py" and "distributed_type" in data and "compute_environment" in data


file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout)
