"""LitGPT: ``litgpt finetune|pretrain CHECKPOINT [--config x.yaml] [--train.micro_batch_size 4] ...``.

Its CLI is jsonargparse over each command's ``setup()``: the command's own defaults, then
``--config`` files and ``--section.key`` flags in command-line order, a later one winning. There is
no accumulation setting: LitGPT derives it from the global batch,
``global_batch_size // (devices * num_nodes) // micro_batch_size`` (``litgpt.args.TrainArgs``), so
accumulation lives where ``train.global_batch_size`` does and is written there as
``micro x accumulation x devices x nodes``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult, set_flags
from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import MISSING, count, get
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.lightning import PRECISION
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import cli_options, knob_value, load_config, precision_of

name = "litgpt"
arg_names: tuple[str, ...] = ("litgpt",)
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()  # its hyperparameter dump says micro_batch_size=N, as any script's
_FINETUNE = {"train.micro_batch_size": 1, "train.global_batch_size": 16, "devices": 1, "num_nodes": 1}
# Each training command's setup() defaults (litgpt 0.5: finetune/*.py and pretrain.py); pretrain's
# devices is "auto" (all GPUs found at launch), so its accumulation is not known before launch.
_COMMANDS: dict[str, dict[str, Any]] = {
    "finetune": {**_FINETUNE, "lora_r": 8}, "finetune_lora": {**_FINETUNE, "lora_r": 8},
    "finetune_full": _FINETUNE, "finetune_adapter": _FINETUNE, "finetune_adapter_v2": _FINETUNE,
    "pretrain": {"train.micro_batch_size": 4, "train.global_batch_size": 512, "num_nodes": 1},
}
# Where each knob lives in its settings (flags are ``--`` and the key).
_KEYS = {"micro_batch_size": "train.micro_batch_size", "max_seq_len": "train.max_seq_length",
         "precision": "precision", "lora_rank": "lora_r"}
_GLOBAL, _DEVICES, _NODES = "train.global_batch_size", "devices", "num_nodes"


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    args = job.script_args
    if os.path.basename(job.script or "") == "litgpt" and args and args[0] in _COMMANDS:
        return Recognition(True, f"litgpt {args[0]}, LitGPT's own training command")
    return None


def defaults(version: str | None) -> Mapping[str, Any]:
    return {"micro_batch_size": _FINETUNE["train.micro_batch_size"], "lora_rank": 8}


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    args = job.script_args
    from gpudoc.frameworks import litgpt_asked

    try:
        said, notes = litgpt_asked.settings(job, cwd, (*_KEYS.values(), _GLOBAL, _DEVICES, _NODES))
    except litgpt_asked.asked.Unanswered as exc:
        r.notes.append(f"litgpt: its own parser could not be asked ({exc}); read by gpudoc's own reader with "
                       "litgpt 0.5's defaults")
    else:
        r.notes.extend(notes)
        for knob, key in _KEYS.items():
            found, kind, where, path = said[key]
            r.set(knob, knob_value(knob, found), kind, where, path)
        r.file_presets.update({path: name for _v, kind, _w, path in said.values() if kind == "file" and path})
        _world_and_accumulation(r, said)
        return
    # key -> (value, kind, name, path): each setting as the last source that says it leaves it.
    said = {key: (value, "default", name, None) for key, value in _COMMANDS[args[0]].items()}
    for _i, option, value in cli_options(args[1:]):
        if option == "--config":
            data = load_config(cwd / value, value, r) if (cwd / value).is_file() else None
            if data is None:
                # The file may set any key: a default it would replace is no longer known (a flag
                # after it still is).
                r.notes.append(f"litgpt: --config {value} not read: the settings it may set are unknown")
                said = {key: entry for key, entry in said.items() if entry[1] != "default"}
                continue
            r.file_presets[value] = name
            for key in (*_KEYS.values(), _GLOBAL, _DEVICES, _NODES):
                found = get(data, tuple(key.split(".")))
                if found is not MISSING and found is not None:
                    said[key] = (found, "file", "", value)
        elif option.startswith("--") and option[2:] in (*_KEYS.values(), _GLOBAL, _DEVICES, _NODES):
            said[option[2:]] = (value, "argv", option, None)
    for knob, key in _KEYS.items():
        if key in said:
            found, kind, where, path = said[key]
            r.set(knob, knob_value(knob, found), kind, where, path)
    _world_and_accumulation(r, said)


def _world_and_accumulation(r: JobReading, said: Mapping[str, tuple[Any, str, str, str | None]]) -> None:
    devices = count(said[_DEVICES][0]) if _DEVICES in said else None
    nodes = count(said[_NODES][0]) if _NODES in said else None
    if not isinstance(devices, int) or not isinstance(nodes, int) or devices < 1 or nodes < 1:
        shown = said[_DEVICES][0] if _DEVICES in said else "auto"
        r.notes.append(f"litgpt: devices = {shown} is counted at launch: gradient accumulation (global_batch_size // "
                       "(devices x num_nodes) // micro_batch_size) was not read")
        return
    r.launch.update({"nproc_per_node": devices, "nnodes": nodes})
    micro = r.knobs.get("micro_batch_size")
    total = count(said[_GLOBAL][0]) if _GLOBAL in said else None
    if micro is None or not isinstance(total, int):
        return
    accumulation = total // (devices * nodes) // int(micro.value)
    if accumulation < 1:  # LitGPT asserts it
        r.notes.append(f"litgpt: global_batch_size {total} is less than micro_batch_size {micro.value} x {devices} "
                       f"device(s) x {nodes} node(s): LitGPT refuses it")
        return
    _value, kind, where, path = said[_GLOBAL]
    r.set("gradient_accumulation_steps", accumulation, kind, where, path)


# -- writing -----------------------------------------------------------------------------------------
def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    set_flags(ed, knobs, res, {"micro_batch_size": "--train.micro_batch_size"})
    if "gradient_accumulation_steps" in knobs:
        said = [o.value for o in ed.find(("--train.micro_batch_size",)) if o.value is not None]
        micro = knobs.get("micro_batch_size", said[-1] if said else None)
        if micro is None:
            res.cannot["gradient_accumulation_steps"] = (
                f"{name}: accumulation is global_batch_size // (devices x nodes) // micro_batch_size, and the micro "
                "batch is not on the command line; pass --train.micro_batch_size too")
        else:
            ed.set_value(("--train.global_batch_size",), str(base.global_batch(micro, knobs["gradient_accumulation_steps"],
                                                                      ctx.world_size)))
            res.expressed.add("gradient_accumulation_steps")
    set_flags(ed, knobs, res, {"max_seq_len": "--train.max_seq_length"})
    set_flags(ed, knobs, res, {"precision": "--precision"}, spell=PRECISION.__getitem__)
    if "lora_rank" in knobs:
        if knobs["lora_rank"]:
            ed.set_value(("--lora_r",), str(knobs["lora_rank"]))
        res.expressed.add("lora_rank")
    res.unsupported(knobs, ("gradient_checkpointing", "zero_stage", "offload_optimizer", "offload_params"),
                    lambda knob: f"{name}: its training commands have no setting for {knob}")
    return res


def write_file(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    if "micro_batch_size" in k:
        res.set(("train", "micro_batch_size"), int(k["micro_batch_size"]), "micro_batch_size")
    if "gradient_accumulation_steps" in k:
        micro = k.get("micro_batch_size", count(get(data, ("train", "micro_batch_size"))))
        if isinstance(micro, int):
            res.set(("train", "global_batch_size"), base.global_batch(micro, k["gradient_accumulation_steps"], ctx.world_size),
                    "gradient_accumulation_steps")
        else:
            res.cannot["gradient_accumulation_steps"] = (f"{name} ({ctx.name}): no train.micro_batch_size to derive "
                                                         "global_batch_size from")
    if "max_seq_len" in k:
        res.set(("train", "max_seq_length"), int(k["max_seq_len"]), "max_seq_len")
    if "precision" in k:
        res.set(("precision",), PRECISION[k["precision"]], "precision")
    if "lora_rank" in k and (k["lora_rank"] or get(data, ("lora_r",)) is not MISSING):
        res.set(("lora_r",), int(k["lora_rank"]), "lora_rank")
    elif "lora_rank" in k:
        res.expressed.add("lora_rank")
    res.unsupported(k, ("gradient_checkpointing", "zero_stage", "offload_optimizer", "offload_params"),
                    lambda knob: f"{name} ({ctx.name}): no setting for {knob}")
    return res


def read_file(data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for knob, key in _KEYS.items():
        value = get(data, tuple(key.split(".")))
        typed = precision_of(value) if knob == "precision" else count(value)
        if value is not MISSING and typed is not None:
            out[knob] = typed
    return out


step_limit = base.flag_step_limit("--train.max_steps")


file_preset: FilePreset | None = FilePreset(name, write_file, read_file)
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches
resolved = base.no_resolved
observed_place = base.no_observed_place


named_configs = base.no_named_configs


def knob_values(knob: str, version: str | None) -> Mapping[str, Any] | None:
    return PRECISION if knob == "precision" else None
