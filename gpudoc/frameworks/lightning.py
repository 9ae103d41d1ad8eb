"""Lightning through LightningCLI: which commands are its, and what its ``--config`` files and ``--section.key`` flags say.

jsonargparse applies ``--config`` files and flags in command-line order, a later one winning. A
``--config`` before the subcommand (``train.py --config cfg.yaml fit``) is the top-level parser's: its
keys sit under the subcommand's name (``fit.data.batch_size``). A script built with ``run=False``
has no subcommand at all (``train.py --config cfg.yaml``). Checkpoints: ``.ckpt`` files, resumed with
``--ckpt_path``.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult, optional_flag, set_flags
from gpudoc.bind.filepresets import FilePreset
from gpudoc.bind.values import is_neutral
from gpudoc.configvalues import MISSING, get
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.job import checkpoints as ckpt
from gpudoc.job.argv import JobCommand
from gpudoc.job.installed import installed_version, job_python, parse_version
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import cli_options, knob_value, load_config, script_tree

name = "lightning"
file_preset: FilePreset | None = None
arg_names: tuple[str, ...] = ("lightning",)
trial_switches: base.TrialSwitches | None = base.TrialSwitches(
    "--trainer.default_root_dir",
    (("--trainer.enable_checkpointing", "false"), ("--trainer.logger", "false"), ("--trainer.limit_val_batches", "0")))
echo: tuple[tuple[str, str], ...] = (  # the Trainer's precision line; its hyperparameters
    ("gradient_accumulation_steps", r"\baccumulate_grad_batches\s*[=:]\s*(\d+)"),
    ("precision", r"Using (bf16|16bit) Automatic Mixed Precision"),
)
# The Trainer's precision, as Lightning 2 spells each.
PRECISION = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed", "bf16-true": "bf16-true",
             "fp16-true": "16-true"}
# As releases before 2.0 spell them (Trainer(precision=16|32|"bf16"), mixed only): "bf16-mixed" stops them.
_PRECISION_1X: Mapping[str, Any] = {"fp32": 32, "fp16": 16, "bf16": "bf16"}


def precision_values(version: str | None) -> Mapping[str, Any]:
    """The values the Trainer's ``precision`` takes in release ``version``, by the profile's spelling
    (2.x's where the release is unknown); a precision the release lacks is not among them."""
    release = parse_version(version)
    return _PRECISION_1X if release is not None and release < (2, 0) else PRECISION


# For a config whose Lightning release gpudoc cannot ask (NeMo's YAML): 1.x's spelling where it has
# one (2.x still takes 16, 32 and "bf16"), else 2.x's.
PRECISION_ANY_RELEASE: Mapping[str, Any] = {knob: _PRECISION_1X.get(knob, value) for knob, value in PRECISION.items()}


_STEP = re.compile(r"step=(\d+)")

SUBCOMMANDS = ("fit", "validate", "test", "predict")
_KEYS = {
    "micro_batch_size": ("data.batch_size", "data.init_args.batch_size"),
    "gradient_accumulation_steps": ("trainer.accumulate_grad_batches",),
    "precision": ("trainer.precision",),
    "gradient_checkpointing": ("model.gradient_checkpointing", "model.init_args.gradient_checkpointing",
                               "model.activation_checkpointing"),
    "max_seq_len": ("data.max_seq_len", "data.max_length", "data.seq_len", "data.block_size",
                    "data.init_args.max_seq_len", "model.max_seq_len"),
    "lora_rank": ("model.lora_rank", "model.lora_r", "model.init_args.lora_rank"),
}


# The classes a config names (``_target_``, as hydra.utils.instantiate reads it) that are Lightning's
# Trainer, in the unified package and in pytorch_lightning.
TRAINERS = frozenset({"lightning.pytorch.trainer.Trainer", "lightning.pytorch.Trainer", "lightning.Trainer",
                      "lightning.pytorch.trainer.trainer.Trainer", "pytorch_lightning.Trainer",
                      "pytorch_lightning.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer"})


def trainer_release(target: str, python: str | None) -> str | None:
    """The release installed for ``python`` of the distribution a Trainer class path ``target`` is
    imported from (``pytorch_lightning.Trainer`` is pytorch_lightning's, ``lightning.*`` lightning's)."""
    return installed_version(target.partition(".")[0], python)


def train_batch_keys(config: Any) -> tuple[str, ...]:
    """A data module whose batch sits one level down, in its training side's own settings
    (``data.init_args.train_params.batch_size`` beside ``val_params``): the one such key, else none."""
    data = config.get("data") if isinstance(config, Mapping) else None
    if not isinstance(data, Mapping):
        return ()
    args, at = (data["init_args"], "data.init_args") if isinstance(data.get("init_args"), Mapping) else (data, "data")
    found = [f"{at}.{sub}.batch_size" for sub, value in args.items()
             if str(sub).startswith("train") and isinstance(value, Mapping) and "batch_size" in value]
    return tuple(found) if len(found) == 1 else ()


# The top-level keys of LightningCLI's parser: jsonargparse refuses a config holding any other, so a
# YAML made of these alone (with a section of its own) is a LightningCLI config.
_TOP = frozenset({"seed_everything", "trainer", "model", "data", "optimizer", "lr_scheduler", "ckpt_path",
                  "weights_only"})


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    if is_lightning_cli(job, job.script_args, cwd):
        return Recognition(True, "LightningCLI's --section.key flags, subcommand, script or config")
    return None


def is_lightning_cli(job: JobCommand, args: list[str], cwd: Path) -> bool:
    """LightningCLI's ``--section.key`` flags or a subcommand first say so at once. A ``--config``
    alone (``train.py --config cfg.yaml``, ``train.py --config cfg.yaml fit``) is LightningCLI's only
    with evidence: the script imports LightningCLI, or the YAML is LightningCLI's own shape. A plain
    script's ``--config some.yaml`` stays what it was."""
    if any(a.startswith(("--trainer.", "--data.", "--model.")) for a in args) or (
            args and args[0] in SUBCOMMANDS):
        return True
    configs = [value for _, name, value in cli_options(args) if name in ("--config", "-c")]
    if not configs:
        return False
    tree = script_tree(job, cwd)
    if tree is not None and any(_names_lightning_cli(node) for node in ast.walk(tree)):
        return True
    sub = _subcommand(args)
    for config in configs:
        if (cwd / config).is_file() and config.endswith((".yaml", ".yml", ".json")):
            data = load_config(cwd / config, config, JobReading())
            if data is not None and _shaped(data.get(sub[1]) if sub and sub[1] in data else data):
                return True
    return False


def _names_lightning_cli(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return any(alias.name == "LightningCLI" for alias in node.names)
    return (isinstance(node, ast.Attribute) and node.attr == "LightningCLI") or (
        isinstance(node, ast.Name) and node.id == "LightningCLI")


def _shaped(data: Any) -> bool:
    if not isinstance(data, Mapping) or not set(data) <= _TOP:
        return False
    sections = [data.get(s) for s in ("model", "data")]
    return isinstance(data.get("trainer"), Mapping) or any(
        isinstance(s, Mapping) and ("class_path" in s or "init_args" in s) for s in sections)


def _subcommand(args: list[str]) -> tuple[int, str] | None:
    """The subcommand (``fit``, ...) and its index: the first positional argument."""
    for i, name, _value in cli_options(args):
        if not name.startswith("-"):
            return (i, name) if name in SUBCOMMANDS else None
    return None


def defaults(version: str | None) -> Mapping[str, Any]:
    return {"gradient_accumulation_steps": 1, "precision": "fp32"}


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    args = job.script_args
    r.framework = name
    python = job_python(job.program, os.environ)
    if python is not None:  # both distributions carry the Trainer; the unified one first
        r.version = installed_version("lightning", python) or installed_version("pytorch_lightning", python)
    from gpudoc.frameworks.lightning_asked import composed

    if composed(job, cwd, r, _KEYS):
        return
    for knob, value in defaults(None).items():
        r.set(knob, value, "default", name)
    sub = _subcommand(args)
    # jsonargparse applies --config files and flags in the order given; a --config before the
    # subcommand is the top-level parser's, whose keys sit under the subcommand's name (fit.data...).
    for i, option, value in cli_options(args):
        if option in ("--config", "-c"):
            data = load_config(cwd / value, value, r) if (cwd / value).is_file() else None
            prefix = f"{sub[1]}." if sub is not None and i < sub[0] else ""
            for knob, keys in _KEYS.items():
                if knob == "micro_batch_size":
                    within = data.get(prefix[:-1]) if prefix and isinstance(data, Mapping) else data
                    keys = (*keys, *train_batch_keys(within))  # under the subcommand: keys within it
                for key in keys:
                    found = get(data, tuple((prefix + key).split("."))) if data is not None else MISSING
                    typed = knob_value(knob, found) if found is not MISSING else None
                    if typed is not None:
                        r.set(knob, typed, "file", prefix + key, value)
                        break
        elif option.startswith("--"):
            for knob, keys in _KEYS.items():
                if option[2:] in keys:
                    r.set(knob, knob_value(knob, value), "argv", option)


# -- writing ---------------------------------------------------------------------------------------
def _precision(ed: ArgEdits, knobs: Mapping[str, Any], res: PresetResult, version: str | None) -> None:
    """``--trainer.precision`` in the spelling the installed release accepts (2.x when unknown)."""
    values = precision_values(version)
    if "precision" not in knobs or knobs["precision"] in values:
        set_flags(ed, knobs, res, {"precision": "--trainer.precision"}, spell=lambda v: str(values[v]))
    else:
        res.cannot["precision"] = (f"{name}: Lightning {version} has no precision '{knobs['precision']}' (its "
                                   f"Trainer takes {', '.join(str(v) for v in values.values())})")


def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    if "micro_batch_size" in knobs:
        batch_flags = ("--data.batch_size", "--data.init_args.batch_size")
        present = [f for f in batch_flags if ed.has((f,))] or [batch_flags[0]]
        ed.set_value((present[0],), str(knobs["micro_batch_size"]))
        res.expressed.add("micro_batch_size")
    set_flags(ed, knobs, res, {"gradient_accumulation_steps": "--trainer.accumulate_grad_batches"})
    _precision(ed, knobs, res, ctx.version)
    gc = knobs.get("gradient_checkpointing")
    if gc is not None:
        flags: tuple[str, ...] = ("--model.gradient_checkpointing", "--model.init_args.gradient_checkpointing",
                                  "--model.activation_checkpointing")
        present = [f for f in flags if ed.has((f,))]
        if present:
            ed.set_value((present[0],), str(gc).lower())
            res.expressed.add("gradient_checkpointing")
        elif is_neutral("gradient_checkpointing", gc):
            res.expressed.add("gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = (f"{name}: the Trainer has no checkpointing flag; the command has "
                                                    f"none of {', '.join(flags)}")
    zero = int(knobs.get("zero_stage", 0) or 0)
    off_opt = bool(knobs.get("offload_optimizer", False))
    off_par = bool(knobs.get("offload_params", False))
    strategy = ed.find(("--trainer.strategy",))
    if zero > 0:
        if off_par and zero < 3:
            res.cannot["offload_params"] = f"{name}: parameter offload needs zero_stage = 3 (deepspeed_stage_3_offload)"
        value = f"deepspeed_stage_{zero}" + ("_offload" if (off_opt or off_par) and zero >= 2 else "")
        if off_opt and zero < 2:
            res.cannot["offload_optimizer"] = f"{name}: optimizer offload needs zero_stage >= 2"
        ed.set_value(("--trainer.strategy",), value)
        res.expressed.update(k for k in ("zero_stage", "offload_optimizer", "offload_params") if k in knobs and k not in res.cannot)
    else:
        if strategy and any((o.value or "").startswith("deepspeed") for o in strategy):
            ed.set_value(("--trainer.strategy",), "ddp")
        res.unsupported(knobs, ("zero_stage", "offload_optimizer", "offload_params"),
                        lambda knob: f"{name}: CPU offload goes through a DeepSpeed strategy; set zero_stage >= 2")
    optional_flag(ed, knobs, res, name, "max_seq_len",
                  ("--data.max_seq_len", "--data.max_length", "--data.seq_len", "--data.block_size",
                    "--data.init_args.max_seq_len", "--model.max_seq_len"))
    optional_flag(ed, knobs, res, name, "lora_rank", ("--model.lora_rank", "--model.lora_r",
                                                      "--model.init_args.lora_rank"))
    return res


step_limit = base.flag_step_limit("--trainer.max_steps")


def resume_switch(path: str) -> tuple[str, ...]:
    return ("--ckpt_path", path)


launches = base.no_launches

# The Trainer's resolved precision, in the profile's spellings: 2.x's names and 1.x's.
_RESOLVED_PRECISION = {str(v): k for k, v in (*_PRECISION_1X.items(), *PRECISION.items())}


observed_place = base.no_observed_place


named_configs = base.no_named_configs


def knob_values(knob: str, version: str | None) -> Mapping[str, Any] | None:
    return precision_values(version) if knob == "precision" else None


def resolved(settings: Mapping[str, Any]) -> base.Resolved:
    """The Trainer's own attributes as the probe read them in its training loop (its accumulation,
    world and precision connector's value) and the steps it estimated."""
    knobs = base.counted(settings, {"gradient_accumulation_steps": "accumulate_grad_batches",
                                    "world_size": "world_size"})
    precision = _RESOLVED_PRECISION.get(str(settings.get("precision")))
    if precision is not None:
        knobs["precision"] = (precision, "precision")
    return base.Resolved(knobs, base.first_count(settings, "estimated_stepping_batches", "max_steps"))


def checkpoints(args: list[str], cwd: Path, since: float | None) -> list[ckpt.Checkpoint]:
    """``.ckpt`` files under the Trainer's ``default_root_dir`` (``checkpoints/``, or
    ``lightning_logs/version_*/checkpoints/`` with a logger) or a ``ModelCheckpoint`` ``dirpath`` in
    the config; complete when the file is a whole zip archive (``torch.save``'s format)."""
    config = ckpt.flag(args, "--config") or ckpt.flag(args, "-c")
    data = ckpt.load(cwd / config) if config else None
    root_name = ckpt.flag(args, "--trainer.default_root_dir") or ckpt.dig(data, ("trainer", "default_root_dir"))
    root = cwd / str(root_name) if root_name else cwd
    folders = [(root, root / "checkpoints"),
               *((root, f) for f in sorted((root / "lightning_logs").glob("version_*/checkpoints")))]
    for callback in ckpt.dig(data, ("trainer", "callbacks")) or ():
        dirpath = ckpt.dig(callback, ("init_args", "dirpath")) or ckpt.dig(callback, ("dirpath",))
        if dirpath:
            folders.append((cwd / str(dirpath), cwd / str(dirpath)))
    found = []
    for within, folder in folders:
        for file in ckpt.children(folder):
            if file.suffix == ".ckpt" and ckpt.whole(file) and ckpt.recent(file, since):
                match = _STEP.search(file.name)
                found.append((file.stat().st_mtime, int(match.group(1)) if match else -1, str(file), within))
    return [ckpt.Checkpoint(name, ckpt.shown(Path(file), cwd), step if step >= 0 else None, proof=Path(file),
                       within=within, holds=(Path(file),))
            for _mtime, step, file, within in sorted(found, key=lambda f: f[:3], reverse=True)]
