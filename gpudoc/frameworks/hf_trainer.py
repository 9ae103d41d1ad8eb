"""HF Trainer (transformers' ``Trainer`` and TRL's trainers, which subclass it).

Recognised by what the script imports (``Trainer``, ``TrainingArguments``, ``HfArgumentParser``,
TRL's configs), by a flag only the Trainer's arguments name, or by a config file given first (as
``HfArgumentParser`` and LLaMA-Factory's CLI take one). Its sources, in the order it applies them:
its defaults, ``accelerate launch --config_file``'s config, the config file given first, a
``--deepspeed`` JSON, then its flags. Where the job's interpreter imports transformers, its own
``HfArgumentParser`` parses the flags and the args file, and its ``TrainingArguments`` (or the TRL
config the script imports) gives the defaults of the installed release (``hf_asked``). Checkpoints: ``checkpoint-N`` under ``--output_dir``, resumed
with ``--resume_from_checkpoint``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult, optional_flag, set_flags
from gpudoc.bind.filepresets import FilePreset
from gpudoc.bind.values import is_neutral
from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import InputError
from gpudoc.frameworks import accelerate, base, deepspeed, hf_asked, hydra
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.presetfiles import first_config
from gpudoc.job import checkpoints as ckpt
from gpudoc.job import recognise as source
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import bool_flag, dangling_flag, flag_value, knob_value, load_config

name = "hf-trainer"
# LLaMA-Factory's CLI with flags and a script under accelerate take the Trainer's flags too.
file_preset: FilePreset | None = None
arg_names: tuple[str, ...] = ("hf-trainer", "accelerate", "transformers", "llama-factory")
trial_switches: base.TrialSwitches | None = base.TrialSwitches(
    "--output_dir", (("--save_strategy", "no"), ("--report_to", "none")),
    (("--eval_strategy", "no"), ("--evaluation_strategy", "no"), ("--push_to_hub", "False")))  # renamed in 4.41
echo: tuple[tuple[str, str], ...] = (  # its "***** Running training *****" banner; TrainingArguments' dump
    ("micro_batch_size", r"Instantaneous batch size per device = (\d+)"),
    ("micro_batch_size", r"\bper_device_train_batch_size\s*[=:]\s*(\d+)"),
    ("gradient_accumulation_steps", r"Gradient Accumulation steps = (\d+)"),
)

SEQ_FLAGS = ("--max_seq_length", "--model_max_length", "--cutoff_len", "--max_seq_len")
LORA_FLAGS = ("--lora_r", "--lora_rank")
_DEFAULTS = {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "gradient_checkpointing": False,
             "precision": "fp32"}
# Flags the Trainer's arguments name and a hand-written loop seldom copies. Every training script's
# own (--output_dir, --learning_rate, --max_steps, --num_train_epochs) say nothing of the framework.
_MARKERS = ("--per_device_train_batch_size", "--gradient_accumulation_steps", "--model_name_or_path",
            "--deepspeed", "--gradient_checkpointing", "--activation_checkpointing")
_KNOB_FLAGS = (("micro_batch_size", ("--per_device_train_batch_size",)),
               ("gradient_accumulation_steps", ("--gradient_accumulation_steps",)),
               ("gradient_checkpointing", ("--activation_checkpointing", "--gradient_checkpointing")),
               ("max_seq_len", SEQ_FLAGS), ("lora_rank", LORA_FLAGS))

# The Trainer's own entry names: a job that names one builds its arguments or its Trainer from
# transformers (TRL's trainers and configs are Trainer and TrainingArguments subclasses).
_PACKAGES = ("transformers", "trl")
_NAMES = ("HfArgumentParser", "TrlParser")
_SUFFIXES = ("Trainer", "TrainingArguments")
_TRL_SUFFIXES = ("Config",)  # SFTConfig, DPOConfig, GRPOConfig: TrainingArguments subclasses
# The Trainer's defaults TRL's configs override, differently by release (its _BaseConfig turned
# gradient checkpointing on, and bf16 on unless fp16, in later ones): never the Trainer's for a TRL job.
_TRL_OWN = ("gradient_checkpointing", "precision")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
            "adapter_model.safetensors", "adapter_model.bin")
_DIR = re.compile(r"^checkpoint-(\d+)$")


# -- recognising ---------------------------------------------------------------------------------
def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    args = job.script_args
    flag = next((a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in _MARKERS), None)
    if flag is not None:
        return Recognition(True, f"{flag}, a flag of the Trainer's arguments")
    config = first_config(args, cwd)
    if config is not None:
        return Recognition(True, f"{config}, a config file given first, as HfArgumentParser takes one")
    if uses_hf_trainer(job, cwd) and not hydra.declared(job, cwd):
        return Recognition(True, "the script imports transformers' Trainer or its arguments")
    return None


def uses_hf_trainer(job: JobCommand, cwd: Path) -> bool | None:
    """True when the script (or a module of the job's own tree it imports) names the Trainer, its
    arguments or their parser from transformers/TRL; False when its source was read and does not;
    None when there is no source to read (a module that is not here, a pipe, no script)."""
    trees = list(source.job_sources(job, cwd))
    if not trees:
        return None
    return any(_names_hf(node) for tree in trees for node in ast.walk(tree))


def _uses_trl(job: JobCommand, cwd: Path) -> bool:
    """Whether the job builds TRL's trainer or config (``SFTTrainer``, ``SFTConfig``, ``TrlParser``)."""
    return any(_names_hf(node, packages=("trl",)) for tree in source.job_sources(job, cwd) for node in ast.walk(tree))


def _hf_name(package: str, name: str) -> bool:
    if name in _NAMES or name.endswith(_SUFFIXES):
        return True
    return package == "trl" and name.endswith(_TRL_SUFFIXES)


def _names_hf(node: ast.AST, packages: tuple[str, ...] = _PACKAGES) -> bool:
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        package = node.module.split(".")[0]
        return package in packages and any(_hf_name(package, alias.name) for alias in node.names)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id in packages and _hf_name(node.value.id, node.attr)
    return False


# -- reading ---------------------------------------------------------------------------------------
def defaults(version: str | None) -> Mapping[str, Any]:
    return dict(_DEFAULTS)


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    """The Trainer's defaults are the job's only when its source names the Trainer
    (``uses_hf_trainer``); otherwise a knob no flag sets is unknown."""
    args = job.script_args
    trainer = uses_hf_trainer(job, cwd)
    r.framework = name
    trl = bool(trainer) and _uses_trl(job, cwd)
    config = first_config(args, cwd)
    # A script that builds its arguments with TRL's TrlParser takes a --config YAML under its flags.
    yaml = flag_value(args, ("--config",)) if trl and config is None else None
    answer = _asked(job, cwd, r, config, trl, yaml[1] if yaml else None) if trainer else None
    if answer is not None:
        hf_asked.place(r, answer, "default", name, config)
    elif trainer:
        for knob, value in defaults(None).items():
            if not (trl and knob in _TRL_OWN):
                r.set(knob, value, "default", name)
    else:
        said = "its source could not be read" if trainer is None else \
            "its source does not name transformers' Trainer, TrainingArguments or HfArgumentParser"
        r.notes.append(f"{job.script or 'the script'}: read as HF Trainer flags, but {said}: the Trainer's "
                       "defaults are not assumed; a knob neither a flag nor the script's own argparse default "
                       "sets is unknown")
        _own_defaults(job, cwd, r)
    accelerate.accelerate_config(job, cwd, r, trainer=True)
    if config is not None:
        data = load_config(cwd / config, config, r)
        from gpudoc.frameworks.registry import file_layout, file_preset  # it holds this module

        preset = file_layout(data, Path(config).suffix.lower()) if data is not None else None
        if preset is not None and data is not None:

            for knob, value in file_preset(preset).read(data).items():
                r.set(knob, value, "file", "", config)
            r.file_presets[config] = preset
    if answer is not None and (config or yaml):
        hf_asked.place(r, answer, "file", name, config or (yaml[1] if yaml else None))
    _given, ds = deepspeed_config(args)
    if ds is not None and (cwd / ds).is_file():
        data = load_config(cwd / ds, ds, r)
        if data is not None:
            for knob, value in deepspeed.read_file(data).items():
                r.set(knob, value, "file", "", ds)
            r.file_presets[ds] = ""  # the hf-trainer preset follows --deepspeed itself
    flag = dangling_flag(args, ("--per_device_train_batch_size", "--gradient_accumulation_steps",
                                *SEQ_FLAGS, *LORA_FLAGS))
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
    for knob, flags in (("max_seq_len", SEQ_FLAGS), ("lora_rank", LORA_FLAGS)):
        hit = flag_value(args, flags)
        if hit is not None:
            r.set(knob, knob_value(knob, hit[1]), "argv", hit[0])
    if answer is not None:
        hf_asked.place(r, answer, "argv", name, config)
        _own_flags_note(r, answer)
    unsettled = [knob for knob in _TRL_OWN if knob not in r.knobs]
    if trl and unsettled:
        r.notes.append(f"{job.script or 'the script'}: builds TRL's trainer or config, whose defaults are not the "
                       "Trainer's and change between TRL releases (recent ones checkpoint, and train in bf16 unless "
                       f"fp16 is set): {' and '.join(unsettled)} stay unknown until a flag or a profile says")


def _asked(job: JobCommand, cwd: Path, r: JobReading, config: str | None, trl: bool,
           yaml: str | None) -> dict[str, Any] | None:
    """HfArgumentParser's parse of the command (and of the args file given first) over the installed
    TrainingArguments, or the TRL config the script imports; None (with a note) when not asked."""
    trl_classes = sorted(_trl_configs(job, cwd)) if trl else []
    request = {"framework": "hf-trainer", "args": job.script_args[1:] if config else job.script_args,
               "config": config, "trl_classes": trl_classes}
    files = [cwd / f for f in (config, yaml) if f is not None and (cwd / f).is_file()]
    answer = hf_asked.ask(job, cwd, r, request, files, "hf-trainer: transformers' "
                          "HfArgumentParser")
    return answer


def _own_flags_note(r: JobReading, answer: dict[str, Any]) -> None:
    """Knobs read from flags the parser asked does not declare: the script's own dataclasses' (its
    ``ModelArguments``), which are its code and never imported: read as written, and said so."""
    own = sorted(f"{knob} ({k.name})" for knob, k in r.knobs.items()
                 if k.kind == "argv" and k.name.startswith("-") and r.declared is not None and k.name not in r.declared)
    if own:
        r.notes.append(f"hf-trainer: transformers {answer.get('versions', {}).get('transformers', '?')}'s "
                       f"HfArgumentParser was asked for {answer.get('class')} only; {', '.join(own)} "
                       f"{'is a flag' if len(own) == 1 else 'are flags'} of the script's own argument dataclasses, "
                       "which are its code and not imported: read as written")


def _trl_configs(job: JobCommand, cwd: Path) -> set[str]:
    """The TRL config classes the script imports (SFTConfig, DPOConfig ...)."""
    return {alias.name for tree in source.job_sources(job, cwd) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trl"
            for alias in node.names if alias.name.endswith(_TRL_SUFFIXES)}


def _own_defaults(job: JobCommand, cwd: Path, r: JobReading) -> None:
    """A hand-written script with the Trainer's flags: the defaults its own parser declares for
    them (its place is the script's flag, which the parser takes when gpudoc adds it)."""
    own = source.argparse_defaults(job, cwd)
    script = job.script or "script"
    for knob, flags in _KNOB_FLAGS:
        flag = next((f for f in flags if f in own), None)
        if flag is not None:
            r.set(knob, knob_value(knob, own[flag]), "default", script)
    if "--bf16" in own or "--fp16" in own:
        precision = "bf16" if own.get("--bf16") else "fp16" if own.get("--fp16") else "fp32"
        r.set("precision", precision, "default", script)


# -- writing ---------------------------------------------------------------------------------------
def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    set_flags(ed, knobs, res, {"micro_batch_size": "--per_device_train_batch_size",
                               "gradient_accumulation_steps": "--gradient_accumulation_steps"})
    gc = knobs.get("gradient_checkpointing")
    if gc is not None:
        # transformers 5 ignores its old --gradient_checkpointing once --activation_checkpointing is given;
        # a release that declares only one of them (asked) gets that one.
        flags = [f for f in ("--gradient_checkpointing", "--activation_checkpointing") if hf_asked.declared(ctx.declared, f)]
        flag = "--activation_checkpointing" if ed.has(("--activation_checkpointing",)) \
            and "--activation_checkpointing" in flags else flags[0] if flags else None
        if isinstance(gc, bool) and flag is not None:
            ed.set_bool((flag,), gc)
            res.expressed.add("gradient_checkpointing")
        elif flag is None:
            res.cannot["gradient_checkpointing"] = f"{name}: the job's transformers declares no checkpointing flag"
        else:
            res.cannot["gradient_checkpointing"] = f"{name}: --gradient_checkpointing is on/off; '{gc}' has no flag"
    prec = knobs.get("precision")
    missing = hf_asked.undeclared(ctx.declared, ("--bf16", "--fp16"))
    if prec is not None and missing:
        res.cannot["precision"] = f"{name}: the job's transformers declares no {missing} flag"
    elif prec is not None:
        if prec == "bf16":
            ed.set_bool(("--bf16",), True)
            ed.remove(("--fp16",))
        elif prec == "fp16":
            ed.set_bool(("--fp16",), True)
            ed.remove(("--bf16",))
        elif prec == "fp32":
            ed.remove(("--bf16",))
            ed.remove(("--fp16",))
        if prec in ("bf16", "fp16", "fp32"):
            res.expressed.add("precision")
        else:
            res.cannot["precision"] = (f"{name}: --bf16/--fp16 are mixed precision with fp32 master weights; "
                                       f"'{prec}' needs the model loaded in that dtype by the script")
    args = ed.result()
    res.follow.extend(named_configs(args))
    given, ds = deepspeed_config(args)
    lacks = "the command has no --deepspeed" if not given else None if ds else \
        "the command's --deepspeed names no file (the Trainer's parser refuses it too)"
    for knob in ("zero_stage", "offload_optimizer", "offload_params"):
        if knob in knobs and lacks is not None and not is_neutral(knob, knobs[knob]):
            res.cannot[knob] = (f"{name}: {knob} reaches the Trainer only through the DeepSpeed JSON named by "
                                f"--deepspeed, and {lacks}")
    optional_flag(ed, knobs, res, name, "max_seq_len", SEQ_FLAGS)
    optional_flag(ed, knobs, res, name, "lora_rank", LORA_FLAGS)
    return res


def deepspeed_config(args: list[str]) -> tuple[bool, str | None]:
    """Where the Trainer's DeepSpeed config is: whether the command gives ``--deepspeed``, and the JSON
    it names (the last one's, as argparse keeps it). A bare ``--deepspeed`` (nothing, or another flag,
    after it) names none: the Trainer's parser refuses it, so no file is read or followed, yet the
    command is not said to lack the flag."""
    found = ArgEdits(list(args)).find(("--deepspeed",))
    value = found[-1].value if found else None
    return bool(found), value if value and not value.startswith("-") else None


def named_configs(args: list[str]) -> list[tuple[str, str, bool]]:
    """The DeepSpeed JSON ``--deepspeed`` names: the Trainer fills its "auto" values from its own flags."""
    path = deepspeed_config(args)[1]
    return [(path, "deepspeed", True)] if path else []


step_limit = base.flag_step_limit("--max_steps")


# -- resuming --------------------------------------------------------------------------------------
def resume_switch(path: str) -> tuple[str, ...]:
    return ("--resume_from_checkpoint", path)


launches = base.no_launches


knob_values = base.no_knob_values
observed_place = base.no_observed_place


def resolved(settings: Mapping[str, Any]) -> base.Resolved:
    """The Trainer's arguments as the probe read them in the job (after ``__post_init__``: a subclass's
    defaults in, TRL's configs too) and its ``state.max_steps`` (epochs multiplied out)."""
    knobs = base.counted(settings, {"micro_batch_size": "per_device_train_batch_size",
                                    "gradient_accumulation_steps": "gradient_accumulation_steps",
                                    "world_size": "world_size"})
    bf16, fp16 = settings.get("bf16"), settings.get("fp16")
    if isinstance(bf16, bool) and isinstance(fp16, bool):
        knobs["precision"] = ("bf16", "bf16") if bf16 else ("fp16", "fp16") if fp16 else ("fp32", "bf16")
    if isinstance(settings.get("gradient_checkpointing"), bool):
        knobs["gradient_checkpointing"] = (settings["gradient_checkpointing"], "gradient_checkpointing")
    optim = settings.get("optim")
    if isinstance(optim, str) and optim:
        named = optim.split(".")[-1].lower()  # OptimizerNames.ADAMW_TORCH_FUSED, or its value
        knobs["optimizer"] = ("adamw_8bit" if "8bit" in named else "adamw" if named.startswith("adamw") else named,
                              "optim")
    return base.Resolved(knobs, base.first_count(settings, "total_steps", "max_steps"))


def checkpoints(args: list[str], cwd: Path, since: float | None) -> list[ckpt.Checkpoint]:
    """``checkpoint-N`` directories under ``--output_dir`` (or the ``output_dir`` of the config file
    given first, as LLaMA-Factory takes it); complete when ``trainer_state.json`` reads and a model
    weights file is there."""
    out = ckpt.flag(args, "--output_dir")
    first = args[1:2] if args[:1] in (["train"], ["sft"]) else args[:1]  # `llamafactory-cli train CONFIG`
    if out is None and first and first[0].endswith((".yaml", ".yml", ".json")):
        out = ckpt.config_value(cwd / first[0], ("output_dir",))
    if out is None:
        return []
    found = []
    for directory in ckpt.children(cwd / out):
        match = _DIR.match(directory.name)
        state = directory / "trainer_state.json"
        if not match or not state.is_file() or not any((directory / weights).is_file() for weights in _WEIGHTS):
            continue
        try:
            step = int(json.loads(state.read_text(encoding="utf-8"))["global_step"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a trainer state cut short: not complete
        if ckpt.recent(state, since):
            found.append((step, directory))
    return [ckpt.Checkpoint(name, ckpt.shown(directory, cwd), step, proof=directory / "trainer_state.json",
                            within=cwd / out, holds=(directory,))
            for step, directory in sorted(found, reverse=True)]
