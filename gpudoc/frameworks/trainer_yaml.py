"""What axolotl's and LLaMA-Factory's CLIs share: one YAML, given first, that holds the job's knobs.

The YAML is theirs by its keys or by the program that reads it. Its sources in their order: the
trainer's defaults, accelerate's config, the YAML and the DeepSpeed JSON it names. A knob the YAML
leaves out is written into the YAML (``JobReading.home``), the one place these CLIs read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.configvalues import get
from gpudoc.frameworks.accelerate import accelerate_config
from gpudoc.frameworks.presetfiles import first_config, follow_deepspeed, set_from
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import load_config

# The presets whose YAML is a whole job: one of these keys' layouts is that CLI's, whatever runs it.
_JOB_YAMLS = ("axolotl", "llama-factory")


def config_of(job: JobCommand, cwd: Path, preset: str, programs: tuple[str, ...]) -> str | None:
    """The YAML given first when it is ``preset``'s: by its keys, or (keys of neither) by the
    program that reads it (``programs``)."""
    config = first_config(job.script_args, cwd)
    if config is None:
        return None
    data = load_config(cwd / config, config, JobReading())
    from gpudoc.frameworks.registry import file_layout  # it holds the modules that use this one

    found = file_layout(data, Path(config).suffix.lower()) if data is not None else None
    if found in _JOB_YAMLS:
        return config if found == preset else None
    program = os.path.basename(job.script or "")
    return config if program in programs or any(program.startswith(f"{p}.") for p in programs) else None


def open_config(job: JobCommand, cwd: Path, r: JobReading, preset: str, programs: tuple[str, ...],
                defaults: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The YAML and its data, with the trainer's defaults set in ``r`` (None: nothing to read)."""
    config = config_of(job, cwd, preset, programs)
    if config is None:
        return None
    r.framework, r.home, r.file_presets[config] = preset, config, preset
    data = load_config(cwd / config, config, r)
    if data is None:
        return None
    for knob, value in defaults.items():
        r.set(knob, value, "default", preset)
    return config, data


def read_layers(job: JobCommand, cwd: Path, r: JobReading, preset: str, config: str, data: Mapping[str, Any]) -> None:
    """accelerate's config, the YAML, then the DeepSpeed JSON the YAML names."""
    accelerate_config(job, cwd, r, trainer=True)
    set_from(r, config, preset, data)
    follow_deepspeed(r, cwd, config, get(data, ("deepspeed",)), "deepspeed:")
