"""nanoGPT: ``train.py [config/x.py ...] [--key=value ...]`` through its ``configurator.py``.

The configurator ``exec()``s config ``.py`` files, then takes ``--key=value`` (never ``--key value``,
which it would read as a config file), in command-line order. ``gradient_accumulation_steps`` is
the total over all ranks: ``train.py`` divides it by the world size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult
from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import count, num
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.trainer_configs import read_simple
from gpudoc.job import recognise as source
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import load_config, to_int, typed

name = "nanogpt"
arg_names: tuple[str, ...] = ("nanogpt",)
trial_switches: base.TrialSwitches | None = base.TrialSwitches(
    "--out_dir", (("--always_save_checkpoint", "False"), ("--wandb_log", "False")))
echo: tuple[tuple[str, str], ...] = (  # configurator.py's "Overriding: key = value"
    ("micro_batch_size", r"Overriding: batch_size = (\d+)"),
    ("gradient_accumulation_steps", r"Overriding: gradient_accumulation_steps = (\d+)"),
    ("max_seq_len", r"Overriding: block_size = (\d+)"),
)
DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_FROM_DTYPE = {v: k for k, v in DTYPE.items()}
_KEYS = {"batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
         "block_size": "max_seq_len", "dtype": "precision"}


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    """A config ``.py`` given to the script, or ``--key=value`` flags, with a script whose source
    runs the configurator. ``--key=value`` is every argparse script's spelling too: without the
    source to say configurator, flags alone are not nanoGPT's."""
    args = job.script_args
    mentions = source.source_mentions(job, cwd, "configurator", "exec(")
    if mentions is False:
        return None
    if any(a.endswith(".py") and not a.startswith("-") for a in args):
        return Recognition(True, "a config .py given to the script, as nanoGPT's configurator.py takes one")
    if mentions and any(a.startswith("--") and "=" in a for a in args):
        return Recognition(True, "--key=value flags to a script that runs nanoGPT's configurator.py")
    if not args and source.source_mentions(job, cwd, "configurator.py"):
        return Recognition(True, "a script that runs nanoGPT's configurator.py, on its own defaults")
    return None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    # train.py divides by its WORLD_SIZE: the processes on every node.
    world = max(1, int(r.launch.get("nproc_per_node") or to_int(job.options.get("--nproc_per_node")) or 1)) * max(
        1, int(r.launch.get("nnodes") or to_int(job.options.get("--nnodes")) or 1))
    script = cwd / job.script if job.script else None
    if script is not None and script.suffix == ".py" and script.is_file():
        # train.py's own globals, set before its configurator runs: the job's defaults, changed
        # with --key=value like any other.
        own = load_config(script, job.script or "", r) or {}
        for key, knob in _KEYS.items():
            if key in own and key != "dtype":  # train.py's dtype is an expression of the GPU it finds
                _set(r, knob, own[key], ("default", name, None), world)
    for tok in job.script_args:  # configurator.py: config files, then --key=value, in order
        if tok.endswith(".py") and not tok.startswith("-"):
            data = load_config(cwd / tok, tok, r) if (cwd / tok).is_file() else None
            for key, knob in _KEYS.items():
                if data is not None and key in data:
                    _set(r, knob, data[key], ("file", key, tok), world)
                    r.file_presets[tok] = name
        elif tok.startswith("--") and "=" in tok:
            key, _, value = tok[2:].partition("=")
            if key in _KEYS:
                _set(r, _KEYS[key], typed(value) if key != "dtype" else value, ("argv", f"--{key}", None), world)


def _set(r: JobReading, knob: str, value: Any, where: tuple[str, str, str | None], world: int) -> None:
    kind, key, path = where
    if knob == "precision":
        r.set(knob, _FROM_DTYPE.get(str(value)), kind, key, path)
    elif knob == "gradient_accumulation_steps" and num(value) is not None:
        # nanoGPT's value is the total over all ranks; train.py divides it by the world size.
        r.set(knob, max(1, int(value) // world), kind, key, path)
    else:
        r.set(knob, count(value), kind, key, path)


def accum(knobs: Mapping[str, Any], world_size: int) -> int:
    """nanoGPT's gradient_accumulation_steps is the total over all ranks (train.py divides it)."""
    return int(knobs["gradient_accumulation_steps"]) * max(1, world_size)


def settings(knobs: Mapping[str, Any], world_size: int, res: PresetResult) -> list[tuple[str, Any, str]]:
    """nanoGPT's config keys for the knobs, as (key, value, knob), whether they go on the command
    line (``--key=value``) or into a config ``.py``; what nanoGPT cannot take goes into ``res``."""
    out: list[tuple[str, Any, str]] = []
    if "micro_batch_size" in knobs:
        out.append(("batch_size", int(knobs["micro_batch_size"]), "micro_batch_size"))
    if "gradient_accumulation_steps" in knobs:
        total = accum(knobs, world_size)
        out.append(("gradient_accumulation_steps", total, "gradient_accumulation_steps"))
        if world_size > 1:
            res.notes.append(f"nanoGPT divides gradient_accumulation_steps by the world size: passed "
                             f"{knobs['gradient_accumulation_steps']} x {world_size} = {total}")
    if "max_seq_len" in knobs:
        out.append(("block_size", int(knobs["max_seq_len"]), "max_seq_len"))
    prec = knobs.get("precision")
    if prec is not None:
        if prec in DTYPE:
            out.append(("dtype", DTYPE[prec], "precision"))
        else:
            res.cannot["precision"] = f"nanogpt: dtype is autocast (mixed) only; '{prec}' has no setting"
    res.unsupported(knobs, ("gradient_checkpointing", "zero_stage", "offload_optimizer", "offload_params", "lora_rank"),
                    lambda knob: f"nanogpt: train.py has no setting for {knob}")
    return out


def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    for key, value, knob in settings(knobs, ctx.world_size, res):
        # nanoGPT's configurator accepts only ``--key=value``; ``--key value`` would be read as a config file.
        ed.set_value((f"--{key}",), str(value), eq_only=True, append_form="eq")
        res.expressed.add(knob)
    return res


# The configurator takes ``--key=value`` only.
step_limit = base.flag_step_limit("--max_iters", eq_only=True)


defaults = base.no_defaults
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def resolved(settings: Mapping[str, Any]) -> base.Resolved:
    """The script's globals after its configurator ran (under DDP, train.py has already divided its
    accumulation by the world size: the value is per rank, as the steps count it)."""
    knobs = base.counted(settings, {"micro_batch_size": "batch_size",
                                    "gradient_accumulation_steps": "gradient_accumulation_steps",
                                    "max_seq_len": "block_size"})
    dtype = settings.get("dtype")
    if isinstance(dtype, str) and dtype in _DTYPES:  # a value the job wrote: a list or dict is not hashable
        knobs["precision"] = (_DTYPES[dtype], "dtype")
    return base.Resolved(knobs, base.first_count(settings, "max_iters"))


named_configs = base.no_named_configs


def knob_values(knob: str, version: str | None) -> Mapping[str, Any] | None:
    return DTYPE if knob == "precision" else None  # train.py's dtype: autocast, mixed only


def observed_place(parsers: Sequence[Mapping[str, Any]], knob: str, value: Any,
                   stale: str | None) -> base.ObservedPlace | None:
    """For a knob the reading found no place for: nanoGPT's key for it (``dtype`` for precision) when
    a nanoGPT-style configurator of the job takes it (the script declares it as a global) and it held
    ``value``: the place a ``--key=value`` override reaches."""
    if stale is not None:
        return None
    for parser in parsers:
        if parser.get("type") != "configurator":
            continue
        held, key = resolved(dict(parser.get("values") or {})).knobs.get(knob, (None, ""))
        if held == value and type(held) is type(value) and f"--{key}" in (parser.get("options") or ()):
            return base.ObservedPlace(f"--{key}", f"its own --{key}, which its configurator takes")
    return None


# -- its config file ---------------------------------------------------------------------------------
def write_file(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    for key, value, knob in settings(ctx.knobs, ctx.world_size, res):
        res.set((key,), value, knob)
    return res


def read_file(data: Any) -> dict[str, Any]:
    return read_simple(data, {"micro_batch_size": "batch_size", "max_seq_len": "block_size"})


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """A Python config file the script ``exec``s: top-level names such as ``batch_size``, ``block_size``."""
    return suffix == ".py" and ("batch_size" in data or "block_size" in data)


file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout)
