"""Config files a framework reads whose keys one of gpudoc's file presets knows (``gpudoc.bind.filepresets``).

The preset that writes a file is the one that reads it here, so a knob is read from and written to
the same key. A DeepSpeed JSON that another framework's config names is followed as that framework
follows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import load_config

# Knobs a DeepSpeed JSON named by a Trainer-based config decides: its batch and precision are the
# Trainer's own ("auto", or they must match the Trainer's, which raises otherwise).
_DEEPSPEED_ONLY = ("zero_stage", "offload_optimizer", "offload_params")


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
        set_from(r, label, preset, data, only=only, skip=skip)
    return data


def set_from(r: JobReading, label: str, preset: str, data: Any, *,
             only: tuple[str, ...] | None = None, skip: tuple[str, ...] = ()) -> None:
    from gpudoc.frameworks.registry import file_preset  # it holds the modules that use this one

    for knob, value in file_preset(preset).read(data).items():
        if (only is None or knob in only) and knob not in skip:
            r.set(knob, value, "file", "", label)
    r.file_presets[label] = preset


def follow_deepspeed(r: JobReading, cwd: Path, named_by: str, path: Any, key: str) -> None:
    """The DeepSpeed JSON a trainer's config names: its ZeRO stage and offload. Written through the
    naming file's preset, which follows the JSON as the trainer does (its "auto" values kept)."""
    if not isinstance(path, str) or not path:
        return
    if not (cwd / path).is_file():
        r.notes.append(f"{named_by}: its {key} {path} is not here: zero_stage and offload were not read")
        return
    if read_preset_file(r, cwd, path, "deepspeed", only=_DEEPSPEED_ONLY) is not None:
        r.named_by[path] = named_by
