"""TRL's CLI: ``trl sft|dpo|grpo|kto|reward|rloo [--config cfg.yaml] [--flag value ...]``.

Its ``TrlParser`` takes the ``--config`` YAML's keys as the defaults of the command's dataclasses (the
command's config class, a ``TrainingArguments`` subclass, and ``ModelConfig``), then the flags over
them; a flag therefore beats the YAML, and gpudoc writes a changed knob as a flag. The CLI starts
``accelerate launch`` itself with the accelerate options among its flags or YAML keys
(``--num_processes`` counts all machines, read with its knobs). Its defaults are the config classes' of the installed
release (trl/trainer/*_config.py): gradient checkpointing on from 0.22, bf16 unless fp16 from 0.19.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult, set_flags
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import MISSING, count, get
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import base, hf_asked
from gpudoc.frameworks.base import Recognition
from gpudoc.job.argv import JobCommand
from gpudoc.job.installed import installed_version, parse_version
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import as_bool_text, flag_value, knob_value, load_config

name = "trl"
arg_names: tuple[str, ...] = ("trl",)
trial_switches: base.TrialSwitches | None = None
file_preset: FilePreset | None = None
echo: tuple[tuple[str, str], ...] = ()
_COMMANDS = ("sft", "dpo", "grpo", "kto", "reward", "rloo")
# Each knob's key in the YAML and its flag (``--`` and the key); max_seq_length is SFT's name before 0.17.
_KEYS = (("micro_batch_size", ("per_device_train_batch_size",)),
         ("gradient_accumulation_steps", ("gradient_accumulation_steps",)),
         ("gradient_checkpointing", ("gradient_checkpointing",)),
         ("max_seq_len", ("max_length", "max_seq_length")))


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    args = job.script_args
    if job.launcher is None and os.path.basename(job.script or "") == "trl" and args[:1] \
            and args[0] in _COMMANDS:
        return Recognition(True, f"trl {args[0]}, TRL's own training command")
    return None


def defaults(version: str | None) -> Mapping[str, Any]:
    """TrainingArguments' batch and accumulation, TRL's max_length 1024; gradient checkpointing and
    precision only where the release is known (0.22 and 0.19 changed them)."""
    out: dict[str, Any] = {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_seq_len": 1024}
    release = parse_version(version)
    if release is not None:
        out["gradient_checkpointing"] = release >= (0, 22)
        out["precision"] = "bf16" if release >= (0, 19) else "fp32"
    return out


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    args = job.script_args[1:]
    config = flag_value(args, ("--config",))
    # TRL's own CLI parser in the job's interpreter (the `trl` script's #! line, or the environment
    # `uv run` / `conda run` runs it in); gpudoc's own reading below where it cannot be asked.
    path = config[1] if config is not None else None
    local = cwd / path if path is not None and (cwd / path).is_file() else None
    answer = hf_asked.ask(job, cwd, r, {"framework": "trl", "command": job.script_args[0], "args": args},
                          [local] if local is not None else [], "trl: TRL's own parser")
    if answer is not None:
        r.version = (answer.get("versions") or {}).get("trl")
        for kind in ("default", "file", "argv"):
            hf_asked.place(r, answer, kind, name, path)
        _world(r, load_config(local, path, r) if local is not None and path is not None else None, args)
        return
    python = hf_asked.interpreter(job, cwd)
    version = r.version = installed_version("trl", python) if python is not None else None
    for knob, value in defaults(version).items():
        r.set(knob, value, "default", name)
    if version is None:
        r.notes.append(f"trl: no installed release found for the job's interpreter ({python or 'trl not on PATH'}), "
                       "and its defaults changed between releases (gradient checkpointing from 0.22, bf16 from "
                       "0.19): they stay unknown until the YAML or a flag says")
    data: Any = None
    if config is not None:
        data = load_config(cwd / config[1], config[1], r) if (cwd / config[1]).is_file() else None
        if data is None:
            r.notes.append(f"trl: --config {config[1]} not read")
    for knob, keys in _KEYS:
        for key in keys:
            found = get(data, (key,)) if isinstance(data, Mapping) else MISSING
            if found is not MISSING:
                r.set(knob, knob_value(knob, found), "file", key, config[1] if config else None)
    _precision(r, data, config[1] if config else None, args)
    for knob, keys in _KEYS:
        hit = flag_value(args, tuple(f"--{key}" for key in keys))
        if hit is not None:
            r.set(knob, knob_value(knob, hit[1]), "argv", hit[0])
    _world(r, data, args)


def _precision(r: JobReading, data: Any, path: str | None, args: list[str]) -> None:
    """``--fp16`` (or the YAML's) wins; ``bf16`` on is bf16, off with fp16 off is fp32."""
    said: dict[str, tuple[bool, str, str]] = {}
    for key in ("bf16", "fp16"):
        value = get(data, (key,)) if isinstance(data, Mapping) else MISSING
        if isinstance(value, bool):
            said[key] = (value, "file", key)
        occurrences = ArgEdits(args).find((f"--{key}",), boolean=True)
        if occurrences:
            text = occurrences[-1].value
            on = True if text is None else as_bool_text(text)
            if on is not None:
                said[key] = (on, "argv", f"--{key}")
    if not said:
        return
    chosen = next((word for word in ("fp16", "bf16") if said.get(word, (False,))[0]), None)
    precision = chosen or "fp32"
    _on, kind, where = said[chosen] if chosen else said.get("bf16") or said["fp16"]
    if kind == "file":
        r.set("precision", precision, "file", where, path)
    else:
        r.set("precision", precision, "argv", where)


def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    """Flags over the YAML, in HfArgumentParser's spelling (``--gradient_checkpointing false``)."""
    res = PresetResult()
    set_flags(ed, knobs, res, {"micro_batch_size": "--per_device_train_batch_size",
                               "gradient_accumulation_steps": "--gradient_accumulation_steps"})
    if "max_seq_len" in knobs:
        # The flag the command wrote, else the one the installed release declares (max_seq_length before 0.17).
        flags = [f for f in ("--max_length", "--max_seq_length") if hf_asked.declared(ctx.declared, f)]
        flag = "--max_seq_length" if ed.has(("--max_seq_length",)) and "--max_seq_length" in flags else \
            flags[0] if flags else None
        if flag is None:
            res.cannot["max_seq_len"] = f"{name}: the job's TRL declares neither --max_length nor --max_seq_length"
        else:
            ed.set_value((flag,), str(knobs["max_seq_len"]))
            res.expressed.add("max_seq_len")
    gc = knobs.get("gradient_checkpointing")
    if gc is not None and not hf_asked.declared(ctx.declared, "--gradient_checkpointing"):
        res.cannot["gradient_checkpointing"] = f"{name}: the job's TRL declares no --gradient_checkpointing flag"
    elif isinstance(gc, bool):
        ed.set_bool(("--gradient_checkpointing",), gc, explicit=True)  # on by default from 0.22
        res.expressed.add("gradient_checkpointing")
    prec = knobs.get("precision")
    missing = hf_asked.undeclared(ctx.declared, ("--bf16", "--fp16"))
    if prec is not None and missing:
        res.cannot["precision"] = f"{name}: the job's TRL declares no {missing} flag"
    else:
        base.mixed_precision_flags(ed, res, prec, name, explicit=True)  # bf16 on unless fp16 from 0.19
    res.unsupported(knobs, ("zero_stage", "offload_optimizer", "offload_params", "lora_rank"),
                    lambda knob: f"{name}: {knob} is not written as a flag by gpudoc (its accelerate config or "
                                 "ModelConfig holds it)")
    return res


step_limit = base.flag_step_limit("--max_steps")
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches
resolved = base.no_resolved
knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place


def _world(r: JobReading, data: Any, args: list[str]) -> None:
    """``accelerate launch`` with ``--num_processes`` (all machines) over ``--num_machines``, from its flags
    or the YAML's keys; nothing when neither says (accelerate's own config decides then)."""
    def said(key: str) -> Any:
        hit = flag_value(args, (f"--{key}",))
        return hit[1] if hit is not None else get(data, (key,)) if isinstance(data, Mapping) else None

    total, machines = count(said("num_processes")), count(said("num_machines")) or 1
    if isinstance(total, int) and isinstance(machines, int) and total > 0 and total % machines == 0:
        r.launch.update({"nproc_per_node": total // machines, "nnodes": machines})
