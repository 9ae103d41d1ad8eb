"""axolotl: ``axolotl train cfg.yml`` / ``accelerate launch -m axolotl.cli.train cfg.yml``; the YAML is the job."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import MISSING, FileContext, FileResult, get
from gpudoc.bind.filepresets import FilePreset
from gpudoc.bind.trainer_configs import follows_deepspeed, lora_key, precision_bools, read_simple
from gpudoc.frameworks import base, trainer_yaml
from gpudoc.frameworks.base import Recognition
from gpudoc.job.argv import JobCommand, parse_command
from gpudoc.job.identity import world
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import flag_value

name = "axolotl"
arg_names: tuple[str, ...] = ()
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
    hit = flag_value(after, ("--launcher",))
    if hit is not None:
        after = [tok for tok in after if tok not in (hit[0], hit[1], f"{hit[0]}={hit[1]}")]
    if any(tok.startswith("-") for tok in after):
        r.notes.append(f"axolotl: the options after {config} ({' '.join(after)}) were not read; the knobs are "
                       f"{config}'s")


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


file_preset: FilePreset | None = FilePreset(name, write_file, read_file)
