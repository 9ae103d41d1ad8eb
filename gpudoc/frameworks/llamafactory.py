"""LLaMA-Factory's CLI with a YAML: ``llamafactory-cli train cfg.yaml [key=value ...]``.

The ``key=value`` overrides after the YAML are merged over it (OmegaConf).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import MISSING, FileContext, FileResult, get
from gpudoc.bind.filepresets import FilePreset
from gpudoc.bind.trainer_configs import follows_deepspeed, lora_key, precision_bools, read_simple
from gpudoc.frameworks import base, trainer_yaml
from gpudoc.frameworks.base import Recognition
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import override, typed

name = "llama-factory"
# Its `key=value` overrides after the YAML are the job's own keys; its flags are the Trainer's (hf_trainer).
arg_names: tuple[str, ...] = ()
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
    return out


file_preset: FilePreset | None = FilePreset(name, write_file, read_file)
