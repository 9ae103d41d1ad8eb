"""Jobs whose knobs live in a config file one of gpudoc's file presets knows (``gpudoc.bind.filepresets``).

axolotl and LLaMA-Factory take one YAML (LLaMA-Factory also ``key=value`` overrides after it, merged
over it by OmegaConf); a native DeepSpeed script takes ``--deepspeed_config ds.json``; ``accelerate
launch --config_file`` carries mixed precision, the DeepSpeed plugin and the process count. The preset
that writes a file is the one that reads it here, so a knob is read from and written to the same key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import MISSING, count, get, num
from gpudoc.bind.filepresets import FILE_PRESETS, detect_preset
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import flag_value, load_config, override, typed

DEEPSPEED_CONFIG_FLAGS = ("--deepspeed_config", "--deepscale_config")  # deepspeed.add_config_arguments
# Knobs a DeepSpeed JSON named by a Trainer-based config decides: its batch and precision are the
# Trainer's own ("auto", or they must match the Trainer's, which raises otherwise).
_DEEPSPEED_ONLY = ("zero_stage", "offload_optimizer", "offload_params")
# What each trainer does with a knob its YAML leaves out (axolotl's config schema; LLaMA-Factory's
# TrainingArguments and its ``disable_gradient_checkpointing: false``).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "axolotl": {"micro_batch_size": 1, "gradient_accumulation_steps": 1, "gradient_checkpointing": False},
    "llama-factory": {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "gradient_checkpointing": True},
}
_PROGRAMS = {"axolotl": "axolotl", "llamafactory-cli": "llama-factory", "lmf": "llama-factory"}


def first_config(args: list[str], cwd: Path) -> str | None:
    """HfArgumentParser's / axolotl's / LLaMA-Factory's one config file, given as the first argument
    (after the CLI's ``train`` / ``sft`` subcommand)."""
    for tok in args[:2]:
        if tok in ("train", "sft"):
            continue
        if tok.endswith((".yaml", ".yml", ".json")) and not tok.startswith("-") and (cwd / tok).is_file():
            return tok
        break
    return None


def read_preset_file(r: JobReading, cwd: Path, label: str, preset: str, *,
                     only: tuple[str, ...] | None = None, skip: tuple[str, ...] = ()) -> Any:
    """Read ``label`` through ``preset``: each knob it holds lives there, written back by that preset."""
    data = load_config(cwd / label, label, r) if (cwd / label).is_file() else None
    if data is not None:
        _set_from(r, label, preset, data, only=only, skip=skip)
    return data


def _set_from(r: JobReading, label: str, preset: str, data: Any, *,
              only: tuple[str, ...] | None = None, skip: tuple[str, ...] = ()) -> None:
    for knob, value in FILE_PRESETS[preset].read(data).items():
        if (only is None or knob in only) and knob not in skip:
            r.set(knob, value, "file", "", label)
    r.file_presets[label] = preset


def _follow_deepspeed(r: JobReading, cwd: Path, named_by: str, path: Any, key: str) -> None:
    """The DeepSpeed JSON a trainer's config names: its ZeRO stage and offload. Written through the
    naming file's preset, which follows the JSON as the trainer does (its "auto" values kept)."""
    if not isinstance(path, str) or not path:
        return
    if not (cwd / path).is_file():
        r.notes.append(f"{named_by}: its {key} {path} is not here: zero_stage and offload were not read")
        return
    if read_preset_file(r, cwd, path, "deepspeed", only=_DEEPSPEED_ONLY) is not None:
        r.named_by[path] = named_by


# -- accelerate launch --config_file ---------------------------------------------------------------
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
        _follow_deepspeed(r, cwd, label, plugin.get("deepspeed_config_file"), "deepspeed_config_file")


def read_accelerate(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    """A script of its own under ``accelerate launch --config_file``: the config is all it says."""
    r.framework = "accelerate"
    accelerate_config(job, cwd, r, trainer=False)


# -- native DeepSpeed ------------------------------------------------------------------------------
def deepspeed_config_flag(args: list[str]) -> tuple[str, str] | None:
    return flag_value(args, DEEPSPEED_CONFIG_FLAGS)


def read_deepspeed(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    """A script that hands DeepSpeed its JSON itself (``--deepspeed --deepspeed_config ds.json``):
    batch, accumulation, precision and ZeRO stage are the JSON's, and edits go there."""
    r.framework = "deepspeed"
    hit = deepspeed_config_flag(args)
    if hit is None:
        return
    if read_preset_file(r, cwd, hit[1], "deepspeed") is None:
        r.notes.append(f"deepspeed: {hit[0]} {hit[1]} not read")


# -- axolotl / LLaMA-Factory -----------------------------------------------------------------------
def trainer_config(job: JobCommand, args: list[str], cwd: Path) -> tuple[str, str] | None:
    """(config, preset) when the job is axolotl's or LLaMA-Factory's: its one config file, given
    first, is theirs by its keys or by the program that reads it."""
    config = first_config(args, cwd)
    if config is None:
        return None
    program = os.path.basename(job.script or "")
    by_name = _PROGRAMS.get(program) or ("axolotl" if program.startswith("axolotl.") else None)
    data = load_config(cwd / config, config, JobReading())
    preset = detect_preset(data, Path(config).suffix.lower()) if data is not None else None
    if preset in _DEFAULTS:
        return config, str(preset)
    return (config, by_name) if by_name else None


def read_trainer_yaml(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    """axolotl / LLaMA-Factory: their defaults, accelerate's config, the YAML (and the DeepSpeed JSON
    it names), then LLaMA-Factory's ``key=value`` overrides. A knob the YAML leaves out is written
    into the YAML (``JobReading.home``), the one place these CLIs read."""
    found = trainer_config(job, args, cwd)
    if found is None:
        return
    config, preset = found
    r.framework, r.home, r.file_presets[config] = preset, config, preset
    data = load_config(cwd / config, config, r)
    if data is None:
        return
    for knob, value in _DEFAULTS[preset].items():
        r.set(knob, value, "default", preset)
    auto = preset == "axolotl" and _axolotl_auto_precision(r, config, data)
    accelerate_config(job, cwd, r, trainer=True)
    _set_from(r, config, preset, data)
    if auto:
        r.knobs.pop("precision", None)  # axolotl sets bf16 or fp16 itself, over accelerate's
    _follow_deepspeed(r, cwd, config, get(data, ("deepspeed",)), "deepspeed:")
    after = args[args.index(config) + 1:]
    if preset == "llama-factory":
        _overrides(r, data, after)
    elif any(tok.startswith("-") for tok in after):
        r.notes.append(f"axolotl: the options after {config} ({' '.join(after)}) were not read; the knobs are "
                       f"{config}'s")


def _axolotl_auto_precision(r: JobReading, config: str, data: Mapping[str, Any]) -> bool:
    """axolotl trains in fp32 unless ``bf16``/``fp16`` say otherwise; ``bf16: auto`` picks bf16 where
    the GPU has it, else fp16, at launch: mixed either way, so there is no precision to read or change."""
    bf16, fp16 = get(data, ("bf16",)), get(data, ("fp16",))
    if bf16 is MISSING and fp16 is MISSING:
        r.set("precision", "fp32", "default", "axolotl")
        return False
    if isinstance(bf16, str) and bf16.strip().lower() == "auto" and fp16 is not True:
        r.notes.append(f"axolotl: {config} says bf16: auto (bf16 where the GPU has it, else fp16, decided at "
                       "launch): precision is left as the file says")
        return True
    return False


def _overrides(r: JobReading, data: Mapping[str, Any], after: list[str]) -> None:
    """LLaMA-Factory merges ``key=value`` after its YAML over it (OmegaConf): a knob an override sets
    lives there, written back in place (``[bind] overrides``) when the key holds the knob's own value.
    One that holds it another way (``disable_gradient_checkpointing=``, ``bf16=``) stays as written."""
    given = [o for o in (override(tok) for tok in after) if o is not None]
    read = FILE_PRESETS["llama-factory"].read
    merged = read({**data, **{key: typed(value) for key, value in given}})
    for key, value in given:
        for knob, said in read({key: typed(value)}).items():
            if said == typed(value) and not isinstance(said, bool):
                r.set(knob, merged[knob], "argv", key)
            else:
                r.knobs.pop(knob, None)
                r.notes.append(f"llama-factory: {knob} is set on the command line by {key}={value}; gpudoc "
                               "leaves it there and does not change it")
