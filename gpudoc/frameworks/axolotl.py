"""axolotl: ``axolotl train cfg.yml`` / ``accelerate launch -m axolotl.cli.train cfg.yml``; the YAML is the job.

Where axolotl is importable by the job's interpreter, its own CLI and config schema settle the
values and defaults (``axolotl_asked``); the reading here places each knob, and reads alone where
it is not (pairing options after the YAML as fire does: its ``axolotl train`` CLI takes a value
option's next token even when it is another option).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import MISSING, count, get
from gpudoc.frameworks import base, trainer_yaml
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.presetfiles import follow_deepspeed
from gpudoc.frameworks.trainer_configs import follows_deepspeed, lora_key, precision_bools, read_simple
from gpudoc.job.argv import JobCommand, parse_command
from gpudoc.job.identity import world
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import cli_options, flag_value

name = "axolotl"
arg_names: tuple[str, ...] = ()
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()
_PROGRAMS = ("axolotl",)


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    config = trainer_yaml.config_of(job, cwd, name, _PROGRAMS)
    return Recognition(True, f"{config}, axolotl's config") if config is not None else None


def defaults(version: str | None) -> Mapping[str, Any]:
    # axolotl's config schema
    return {"micro_batch_size": 1, "gradient_accumulation_steps": 1, "gradient_checkpointing": False}


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    found = trainer_yaml.open_config(job, cwd, r, name, _PROGRAMS, defaults(None))
    if found is None:
        return
    config, data = found
    auto = _auto_precision(r, config, data)
    trainer_yaml.read_layers(job, cwd, r, name, config, data)
    if auto:
        r.knobs.pop("precision", None)  # axolotl sets bf16 or fp16 itself, over accelerate's
    args = job.script_args
    after = args[args.index(config) + 1:]
    after = after[:after.index("--")] if "--" in after else after  # the launcher's own options (``launches``)
    _options(cwd, r, [(flag, value) for _i, flag, value in cli_options(after, switches=True) if flag.startswith("--")])
    from gpudoc.frameworks import axolotl_asked

    axolotl_asked.settle(job, cwd, r, config, name)


# The config keys its CLI takes as options after the YAML that hold a knob as a number (axolotl's
# click options are made from its config schema: ``--micro-batch-size``, ``--micro_batch_size``).
_COUNTS = {"micro_batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
           "sequence_len": "max_seq_len", "lora_r": "lora_rank"}


def _options(cwd: Path, r: JobReading, options: list[tuple[str, str]]) -> None:
    """``axolotl train cfg.yml --micro-batch-size 2 --deepspeed ds.json``: each option replaces the
    YAML's key (axolotl's load_cfg), so a knob it names lives on the command line and is changed there.
    An option that holds a knob some other way (a precision switch) is named, not guessed."""
    unread = []
    for flag, value in options:
        key = flag[2:].replace("-", "_")
        if key in _COUNTS:
            r.set(_COUNTS[key], count(value), "argv", flag)
        elif key == "deepspeed":  # replaces the JSON the YAML names, whose ZeRO settings no longer hold
            for knob in ("zero_stage", "offload_optimizer", "offload_params"):
                r.knobs.pop(knob, None)
            follow_deepspeed(r, cwd, flag, value, flag)
            r.named_by.pop(value, None)  # named by the command line: the JSON is written as itself
        elif key in _UNREAD:
            r.knobs.pop(_UNREAD[key], None)
            unread.append(flag)
    if unread:
        r.notes.append(f"axolotl: {', '.join(unread)} on the command line replace the config's keys and were not "
                       "read: what they set is not known before launch")


# Config keys whose options change a knob in a way not read here: the knob each leaves unknown.
_UNREAD = {"bf16": "precision", "fp16": "precision", "gradient_checkpointing": "gradient_checkpointing",
           "load_in_4bit": "quantization", "load_in_8bit": "quantization", "adapter": "lora_rank"}


def _auto_precision(r: JobReading, config: str, data: Mapping[str, Any]) -> bool:
    """axolotl trains in fp32 unless ``bf16``/``fp16`` say otherwise; ``bf16: auto`` picks bf16 where
    the GPU has it, else fp16, at launch: mixed either way, so there is no precision to read or change."""
    bf16, fp16 = get(data, ("bf16",)), get(data, ("fp16",))
    if bf16 is MISSING and fp16 is MISSING:
        r.set("precision", "fp32", "default", name)
        return False
    if isinstance(bf16, str) and bf16.strip().lower() == "auto" and fp16 is not True:
        r.notes.append(f"axolotl: {config} says bf16: auto (bf16 where the GPU has it, else fp16, decided at "
                       "launch): precision is left as the file says")
        return True
    return False


edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
resolved = base.no_resolved
knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place


def launches(job: JobCommand, environ: Mapping[str, str], r: JobReading) -> None:
    """``axolotl train cfg.yml --launcher torchrun -- ARGS`` runs ``torchrun ARGS -m axolotl.cli.train
    cfg.yml`` (``accelerate launch ARGS ...`` for the default launcher; axolotl/cli/utils/train.py):
    the processes per node and nodes that launcher's own options say, srun's in front counting nodes."""
    args = job.script_args
    if job.launcher is not None or os.path.basename(job.script or "") not in _PROGRAMS or "--" not in args:
        return
    hit = flag_value(args[:args.index("--")], ("--launcher",))
    launcher = hit[1] if hit is not None else "accelerate"
    if launcher not in ("torchrun", "accelerate"):
        return
    program = ["torchrun"] if launcher == "torchrun" else ["accelerate", "launch"]
    inner = parse_command([*job.argv[:job.program_index], *program, *args[args.index("--") + 1:], "-m",
                           "axolotl.cli.train"])
    counts = world(inner, environ).as_launch()
    r.launch.update(counts)
    if counts:
        r.notes.append(f"axolotl: its CLI starts {launcher} itself with the options after `--`: "
                       + ", ".join(f"{key} = {value}" for key, value in counts.items()))


# -- its config file ---------------------------------------------------------------------------------
def write_file(data: Any, ctx: FileContext) -> FileResult:
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
    precision_bools(res, data, ctx, "axolotl")
    lora_key(res, data, ctx, "lora_r")
    follows_deepspeed(res, data, ctx, "axolotl")
    return res


def read_file(data: Any) -> dict[str, Any]:
    return read_simple(data, {"micro_batch_size": "micro_batch_size",
                               "gradient_accumulation_steps": "gradient_accumulation_steps",
                               "max_seq_len": "sequence_len", "lora_rank": "lora_r"},
                        bools={"gradient_checkpointing": "gradient_checkpointing"})


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """An axolotl config: its micro batch beside its ``sequence_len``."""
    return suffix != ".py" and "micro_batch_size" in data and "sequence_len" in data


file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout)
