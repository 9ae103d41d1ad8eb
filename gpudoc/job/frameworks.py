"""Each framework's way of taking knobs, read in the order the framework itself applies them.

HF Trainer (and LLaMA-Factory's CLI with flags): its defaults, ``accelerate launch --config_file``'s
config, a config file given as the first argument, a ``--deepspeed`` JSON, then its flags. axolotl's
and LLaMA-Factory's YAML, a native DeepSpeed ``--deepspeed_config`` JSON and accelerate's config
alone: through the file presets that write them (``gpudoc.job.configfiles``). LightningCLI:
``--config`` files and ``--section.key`` flags in command-line order, as jsonargparse applies them
(``gpudoc.job.lightning``). Hydra: the composed config, then ``key=value`` overrides. torchtune:
``--config`` then overrides. nanoGPT: config ``.py`` files, then ``--key=value``. Each reader records
the knob's value with where it lives (``JobReading.set``: a later source wins);
``JobReading.bindings`` says how to write it back there.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from gpudoc.bind.args import HF_LORA_FLAGS, HF_SEQ_FLAGS, NANOGPT_DTYPE
from gpudoc.bind.filecontext import MISSING, count, get, num
from gpudoc.bind.filepresets import FILE_PRESETS, detect_preset
from gpudoc.errors import InputError
from gpudoc.job import configfiles, lightning, recognise
from gpudoc.job.argv import JobCommand
from gpudoc.job.configfiles import first_config
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import (
    GENERIC_KEYS,
    bool_flag,
    dangling_flag,
    flag_value,
    generic_knobs,
    knob_value,
    load_config,
    override,
    script_tree,
    to_int,
    typed,
    usable,
)

HF_DEFAULTS = {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "gradient_checkpointing": False,
               "precision": "fp32"}
# Flags the Trainer's arguments name and a hand-written loop seldom copies. Every training script's
# own (--output_dir, --learning_rate, --max_steps, --num_train_epochs) say nothing of the framework.
HF_MARKERS = ("--per_device_train_batch_size", "--gradient_accumulation_steps", "--model_name_or_path",
              "--deepspeed", "--gradient_checkpointing", "--activation_checkpointing")

def read(job: JobCommand, cwd: Path) -> JobReading:
    reading = JobReading()
    args = job.script_args
    reader = _pick(job, args, cwd)
    if reader is not None:
        reader(job, args, cwd, reading)
    return reading


def _pick(job: JobCommand, args: list[str], cwd: Path) -> Callable[[JobCommand, list[str], Path, JobReading], None] | None:
    if job.launcher == "tune":
        return _torchtune
    if lightning.is_lightning_cli(job, args, cwd):
        return lightning.read
    # A native DeepSpeed script's bare --deepspeed is not the Trainer's --deepspeed ds.json.
    if configfiles.deepspeed_config_flag(args) is not None:
        return configfiles.read_deepspeed
    if configfiles.trainer_config(job, args, cwd) is not None:
        return configfiles.read_trainer_yaml
    hydra = any(a in ("--config-path", "--config-name", "-cp", "-cn") or a.startswith(("--config-path=", "--config-name="))
                for a in args) or _hydra_main(job, cwd) is not None
    trainer = recognise.uses_hf_trainer(job, cwd)
    if any(a.split("=", 1)[0] in HF_MARKERS for a in args) or first_config(args, cwd) is not None or (
            trainer and not hydra):
        return functools.partial(_hf, trainer=trainer)
    if hydra:
        return _hydra
    # nanoGPT's train.py takes `--key=value` through its configurator.py, which exec()s config files;
    # another script's own `--output_dir=out` says nothing of nanoGPT.
    if (any(a.endswith(".py") and not a.startswith("-") for a in args) or any(
            a.startswith("--") and "=" in a for a in args)) and recognise.source_mentions(
            job, cwd, "configurator", "exec(") is not False:
        return _nanogpt
    if any(override(a) for a in args):
        return _hydra
    if job.launcher == "accelerate" and job.options.get("--config_file"):
        return configfiles.read_accelerate
    return None


# -- HF Trainer --------------------------------------------------------------------------------
def _hf(job: JobCommand, args: list[str], cwd: Path, r: JobReading, *, trainer: bool | None = None) -> None:
    """``trainer``: whether the script's source names the Trainer (``recognise.uses_hf_trainer``).
    Only then are the Trainer's defaults the job's; otherwise a knob no flag sets is unknown."""
    r.framework = "hf-trainer"
    if trainer:
        for knob, value in HF_DEFAULTS.items():
            r.set(knob, value, "default", "hf-trainer")
    else:
        said = "its source could not be read" if trainer is None else \
            "its source does not name transformers' Trainer, TrainingArguments or HfArgumentParser"
        r.notes.append(f"{job.script or 'the script'}: read as HF Trainer flags, but {said}: the Trainer's "
                       "defaults are not assumed; a knob neither a flag nor the script's own argparse default "
                       "sets is unknown")
        _own_defaults(job, cwd, r)
    configfiles.accelerate_config(job, cwd, r, trainer=True)
    config = first_config(args, cwd)
    if config is not None:
        data = load_config(cwd / config, config, r)
        preset = detect_preset(data, Path(config).suffix.lower()) if data is not None else None
        if preset is not None and data is not None:
            for knob, value in FILE_PRESETS[preset].read(data).items():
                r.set(knob, value, "file", "", config)
            r.file_presets[config] = preset
    ds = flag_value(args, ("--deepspeed",))
    if ds is not None and (cwd / ds[1]).is_file():
        data = load_config(cwd / ds[1], ds[1], r)
        if data is not None:
            for knob, value in FILE_PRESETS["deepspeed"].read(data).items():
                r.set(knob, value, "file", "", ds[1])
            r.file_presets[ds[1]] = ""  # the hf-trainer preset follows --deepspeed itself
    flag = dangling_flag(args, ("--per_device_train_batch_size", "--gradient_accumulation_steps",
                                *HF_SEQ_FLAGS, *HF_LORA_FLAGS))
    if flag is not None:  # not the Trainer's default: its parser stops the job on it
        raise InputError(f"{flag}: no value after it (the Trainer's parser refuses the command too)", key=flag)
    for flag, knob in (("--per_device_train_batch_size", "micro_batch_size"),
                       ("--gradient_accumulation_steps", "gradient_accumulation_steps")):
        hit = flag_value(args, (flag,))
        if hit is not None:
            r.set(knob, knob_value(knob, hit[1]), "argv", flag)
    # transformers 5 reads --activation_checkpointing; --gradient_checkpointing is its old alias.
    for flag in ("--gradient_checkpointing", "--activation_checkpointing"):
        on = bool_flag(args, flag)
        if on is not None:
            r.set("gradient_checkpointing", on, "argv", flag)
    bf16, fp16 = bool_flag(args, "--bf16"), bool_flag(args, "--fp16")
    if bf16 or fp16:
        r.set("precision", "bf16" if bf16 else "fp16", "argv", "--bf16" if bf16 else "--fp16")
    for knob, flags in (("max_seq_len", HF_SEQ_FLAGS), ("lora_rank", HF_LORA_FLAGS)):
        hit = flag_value(args, flags)
        if hit is not None:
            r.set(knob, knob_value(knob, hit[1]), "argv", hit[0])


_HF_KNOB_FLAGS = (("micro_batch_size", ("--per_device_train_batch_size",)),
                  ("gradient_accumulation_steps", ("--gradient_accumulation_steps",)),
                  ("gradient_checkpointing", ("--activation_checkpointing", "--gradient_checkpointing")),
                  ("max_seq_len", HF_SEQ_FLAGS), ("lora_rank", HF_LORA_FLAGS))


def _own_defaults(job: JobCommand, cwd: Path, r: JobReading) -> None:
    """A hand-written script with the Trainer's flags: the defaults its own parser declares for
    them (its place is the script's flag, which the parser takes when gpudoc adds it)."""
    own = recognise.argparse_defaults(job, cwd)
    script = job.script or "script"
    for knob, flags in _HF_KNOB_FLAGS:
        flag = next((f for f in flags if f in own), None)
        if flag is not None:
            r.set(knob, knob_value(knob, own[flag]), "default", script)
    if "--bf16" in own or "--fp16" in own:
        precision = "bf16" if own.get("--bf16") else "fp16" if own.get("--fp16") else "fp32"
        r.set("precision", precision, "default", script)


# -- Hydra -----------------------------------------------------------------------------------------
def _hydra_main(job: JobCommand, cwd: Path) -> tuple[str | None, str | None] | None:
    """``@hydra.main(config_path=..., config_name=...)`` in the script: (path, name) as written."""
    tree = script_tree(job, cwd)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) in ("hydra.main", "main"):
                    kw = {k.arg: k.value.value for k in deco.keywords
                          if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)}
                    if "config_name" in kw or "config_path" in kw:
                        return kw.get("config_path"), kw.get("config_name")
    return None


def _hydra(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    r.framework = "hydra"
    path_opt = flag_value(args, ("--config-path", "-cp"))
    name_opt = flag_value(args, ("--config-name", "-cn"))
    declared = _hydra_main(job, cwd) or (None, None)
    script_dir = (cwd / job.script).parent if job.script else cwd
    config_dir = (cwd / path_opt[1]) if path_opt else (script_dir / declared[0]) if declared[0] else None
    name = name_opt[1] if name_opt else declared[1]
    data: Any = None
    full_keys: dict[str, str] = {}  # knob -> its key in the composed config (what an override names)
    if config_dir is not None and name:
        file = config_dir / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
        label = _relative(file, cwd)
        data = load_config(file, label, r, empty_ok=True) if file.is_file() else None
        if data is None:  # unreadable: load_config said why; missing: said here
            if not file.is_file():
                r.notes.append(f"hydra: config {label} not found; only the command's overrides were read")
        else:
            for knob, (key, value) in generic_knobs(data).items():
                r.set(knob, value, "file", key, label)
                full_keys[knob] = key
            _hydra_groups(data, config_dir, cwd, r, full_keys)
    for tok in args:
        over = override(tok)
        if over is None:
            continue
        key, value = over
        for knob, names in GENERIC_KEYS.items():
            typed_value = knob_value(knob, value)
            if full_keys.get(knob) == key or (knob not in r.knobs and key.split(".")[-1] in names
                                              and usable(knob, typed_value)):
                r.set(knob, typed_value, "argv", key)
                full_keys[knob] = key


def _hydra_groups(data: Mapping[str, Any], config_dir: Path, cwd: Path, r: JobReading,
                  full_keys: dict[str, str]) -> None:
    """Hydra's defaults list: ``- group: option`` puts ``group/option.yaml`` under ``group``. A key
    the primary config sets itself wins, as with Hydra's default order (``_self_`` last)."""
    for entry in data.get("defaults") or ():
        if not isinstance(entry, Mapping) or len(entry) != 1:
            continue
        (group, option), = entry.items()
        file = config_dir / str(group) / f"{option}.yaml"
        if not file.is_file():
            continue
        label = _relative(file, cwd)
        for knob, (key, value) in generic_knobs(load_config(file, label, r, empty_ok=True)).items():
            if knob not in full_keys:
                r.set(knob, value, "file", key, label)
                full_keys[knob] = f"{group}.{key}"


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)


# -- torchtune ---------------------------------------------------------------------------------------
_TORCHTUNE_KEYS = {"batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
                   "tokenizer.max_seq_len": "max_seq_len", "enable_activation_checkpointing": "gradient_checkpointing",
                   "dtype": "precision", "model.lora_rank": "lora_rank"}


def _torchtune(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    r.framework = "torchtune"
    config = flag_value(args, ("--config",))
    in_bwd: tuple[Any, str] | None = None  # optimizer_in_bwd, and where it is said
    if config is not None:
        if (cwd / config[1]).is_file():
            data = load_config(cwd / config[1], config[1], r)
            for key, knob in _TORCHTUNE_KEYS.items():
                value = get(data, tuple(key.split("."))) if data is not None else MISSING
                read = knob_value(knob, value) if value is not MISSING else None
                if read is not None:
                    r.set(knob, read, "file", key, config[1])
            if data is not None and "optimizer_in_bwd" in data:
                in_bwd = data["optimizer_in_bwd"], config[1]
        else:
            r.notes.append(f"torchtune: --config {config[1]} is one of torchtune's own configs (not a file "
                           "here): only the command's overrides were read; `tune cp` it to bind its values")
    for tok in args:
        over = override(tok)
        if over is not None and over[0] in _TORCHTUNE_KEYS:
            knob = _TORCHTUNE_KEYS[over[0]]
            r.set(knob, knob_value(knob, over[1]), "argv", over[0])
        elif over is not None and over[0] == "optimizer_in_bwd":
            in_bwd = typed(over[1]), "the command"
    if in_bwd is not None and in_bwd[0] is True:
        # torchtune's recipes raise "Gradient accumulation is not supported with optimizer in bwd":
        # accumulation stays 1, so it is no knob gpudoc may change (the ladder changes only knobs the
        # job declares; halving the batch then lowers the global batch, and says so).
        accum = r.knobs.pop("gradient_accumulation_steps", None)
        r.notes.append(f"torchtune: optimizer_in_bwd is on ({in_bwd[1]}): gradient accumulation stays at "
                       f"{accum.value if accum is not None else 1} (torchtune's recipes refuse more), so gpudoc "
                       "does not change gradient_accumulation_steps")


# -- nanoGPT -----------------------------------------------------------------------------------------
_NANOGPT_KEYS = {"batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
                 "block_size": "max_seq_len", "dtype": "precision"}
_NANOGPT_FROM_DTYPE = {v: k for k, v in NANOGPT_DTYPE.items()}


def _nanogpt(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    r.framework = "nanogpt"
    world = max(1, int(r.launch.get("nproc_per_node") or _nproc(job) or 1))
    for tok in args:  # configurator.py: config files, then --key=value, in order
        if tok.endswith(".py") and not tok.startswith("-"):
            data = load_config(cwd / tok, tok, r) if (cwd / tok).is_file() else None
            for key, knob in _NANOGPT_KEYS.items():
                if data is not None and key in data:
                    _nanogpt_set(r, knob, data[key], ("file", key, tok), world)
                    r.file_presets[tok] = "nanogpt"
        elif tok.startswith("--") and "=" in tok:
            key, _, value = tok[2:].partition("=")
            if key in _NANOGPT_KEYS:
                _nanogpt_set(r, _NANOGPT_KEYS[key], typed(value) if key != "dtype" else value,
                             ("argv", f"--{key}", None), world)


def _nanogpt_set(r: JobReading, knob: str, value: Any, where: tuple[str, str, str | None], world: int) -> None:
    kind, name, path = where
    if knob == "precision":
        r.set(knob, _NANOGPT_FROM_DTYPE.get(str(value)), kind, name, path)
    elif knob == "gradient_accumulation_steps" and num(value) is not None:
        # nanoGPT's value is the total over all ranks; train.py divides it by the world size.
        r.set(knob, max(1, int(value) // world), kind, name, path)
    else:
        r.set(knob, count(value), kind, name, path)


def _nproc(job: JobCommand) -> int | None:
    return to_int(job.options.get("--nproc_per_node"))
