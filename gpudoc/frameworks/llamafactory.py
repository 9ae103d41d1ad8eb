"""LLaMA-Factory's CLI with a YAML: ``llamafactory-cli train cfg.yaml [key=value ...]``.

The ``key=value`` overrides after the YAML are merged over it (OmegaConf). Where LLaMA-Factory is
importable by the job's interpreter its own parser settles the values and defaults
(``llamafactory_asked``); the reading here places each knob, and reads alone where it is not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import MISSING, get
from gpudoc.frameworks import base, trainer_yaml
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.trainer_configs import follows_deepspeed, lora_key, precision_bools, read_simple
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import override, typed

name = "llama-factory"
# Its `key=value` overrides after the YAML are the job's own keys; its flags are the Trainer's (hf_trainer).
arg_names: tuple[str, ...] = ()
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()
_PROGRAMS = ("llamafactory-cli", "lmf")


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    config = trainer_yaml.config_of(job, cwd, name, _PROGRAMS)
    return Recognition(True, f"{config}, LLaMA-Factory's config") if config is not None else None


def defaults(version: str | None) -> Mapping[str, Any]:
    # LLaMA-Factory's TrainingArguments and its ``disable_gradient_checkpointing: false``
    return {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "gradient_checkpointing": True}


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    found = trainer_yaml.open_config(job, cwd, r, name, _PROGRAMS, defaults(None))
    if found is None:
        return
    config, data = found
    trainer_yaml.read_layers(job, cwd, r, name, config, data)
    args = job.script_args
    _overrides(r, data, args[args.index(config) + 1:])
    if os.path.basename(job.script or "") in _PROGRAMS and args and args[0] in _DISTRIBUTED:
        from gpudoc.frameworks import llamafactory_asked

        llamafactory_asked.settle(job, cwd, r, config, name)


def _overrides(r: JobReading, data: Mapping[str, Any], after: list[str]) -> None:
    """LLaMA-Factory merges ``key=value`` after its YAML over it (OmegaConf): a knob an override sets
    lives there, written back in place (``[bind] overrides``) when the key holds the knob's own value.
    One that holds it another way (``disable_gradient_checkpointing=``, ``bf16=``) stays as written."""
    given = [o for o in (override(tok) for tok in after) if o is not None]
    read = read_file
    merged = read({**data, **{key: typed(value) for key, value in given}})
    for key, value in given:
        for knob, said in read({key: typed(value)}).items():
            if said == typed(value) and not isinstance(said, bool):
                r.set(knob, merged[knob], "argv", key)
            else:
                r.knobs.pop(knob, None)
                r.notes.append(f"llama-factory: {knob} is set on the command line by {key}={value}; gpudoc "
                               "leaves it there and does not change it")


# The Trainer's max_steps, as an override the CLI merges over its YAML.
step_limit = base.override_step_limit("max_steps")


edit_args = base.no_edit_args
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
resolved = base.no_resolved
knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place


# The CLI's commands it starts torchrun for (`train`; newer releases name the stages too).
_DISTRIBUTED = ("train", "sft", "dpo", "rm")
_ON = ("true", "y", "1")  # its is_env_enabled


def launches(job: JobCommand, environ: Mapping[str, str], r: JobReading) -> None:
    """``llamafactory-cli train`` starts torchrun itself when ``FORCE_TORCHRUN`` is on or more than
    one GPU is visible: ``NPROC_PER_NODE`` processes (default: the visible GPUs) on ``NNODES`` nodes
    (default 1); one process otherwise. Nothing is set where the count it would take is the
    machine's (no ``CUDA_VISIBLE_DEVICES``, no ``NPROC_PER_NODE``): the profile's ``[gpu] count``
    answers then."""
    from gpudoc.job.identity import visible_selection

    args = job.script_args
    if job.launcher is not None or os.path.basename(job.script or "") not in _PROGRAMS or not args \
            or args[0] not in _DISTRIBUTED:
        return
    indices, uuids = visible_selection(environ)
    visible = len(indices or uuids or ()) or None
    forced = environ.get("FORCE_TORCHRUN", "0").lower() in _ON
    if not forced and visible is None:
        return  # the machine's GPU count decides whether it starts torchrun at all
    if not forced and visible is not None and visible <= 1:
        r.launch.update({"nproc_per_node": 1, "nnodes": 1})
        return
    nproc, nnodes = _count(environ.get("NPROC_PER_NODE")), _count(environ.get("NNODES", "1"))
    fixed = {knob: value for knob, value in (("nproc_per_node", nproc or visible), ("nnodes", nnodes))
             if value is not None}
    r.launch.update(fixed)
    why = "FORCE_TORCHRUN" if forced else f"{visible} GPUs visible"
    per_node = f"NPROC_PER_NODE={nproc}" if nproc else (f"{visible} GPUs in CUDA_VISIBLE_DEVICES" if visible
                                                      else "the machine's GPUs")
    r.notes.append(f"llama-factory: its CLI starts torchrun itself ({why}): processes per node from {per_node}, "
                   f"nodes from NNODES={environ.get('NNODES', '1 (unset)')}")


def _count(value: str | None) -> int | None:
    try:
        return int(value) if value is not None and int(value) > 0 else None
    except ValueError:
        return None


# -- its config file ---------------------------------------------------------------------------------
def write_file(data: Any, ctx: FileContext) -> FileResult:
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
    precision_bools(res, data, ctx, "llama-factory", true_key="pure_bf16")
    lora_key(res, data, ctx, "lora_rank")
    follows_deepspeed(res, data, ctx, "llama-factory")
    return res


def read_file(data: Any) -> dict[str, Any]:
    out = read_simple(data, {"micro_batch_size": "per_device_train_batch_size",
                              "gradient_accumulation_steps": "gradient_accumulation_steps",
                              "max_seq_len": "cutoff_len", "lora_rank": "lora_rank"})
    if isinstance(get(data, ("disable_gradient_checkpointing",)), bool):
        out["gradient_checkpointing"] = not get(data, ("disable_gradient_checkpointing",))
    if get(data, ("pure_bf16",)) is True:  # bf16 weights too, with or without bf16: true beside it
        out["precision"] = "bf16-true"
    return out


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """A LLaMA-Factory config: its ``cutoff_len``, or the Trainer's batch beside its ``stage``."""
    return suffix != ".py" and ("cutoff_len" in data or ("per_device_train_batch_size" in data and "stage" in data))


file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout)
