"""A native DeepSpeed script: one that hands DeepSpeed its JSON itself (``--deepspeed --deepspeed_config ds.json``).

Batch, accumulation, precision and ZeRO stage are the JSON's, and edits go there. A bare
``--deepspeed`` is not the HF Trainer's ``--deepspeed ds.json``.
"""

from __future__ import annotations

from pathlib import Path

from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.presetfiles import read_preset_file
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import flag_value

name = "deepspeed"
arg_names: tuple[str, ...] = ()
_CONFIG_FLAGS = ("--deepspeed_config", "--deepscale_config")  # deepspeed.add_config_arguments


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    hit = flag_value(job.script_args, _CONFIG_FLAGS)
    return Recognition(True, f"{hit[0]}, DeepSpeed's own config argument") if hit is not None else None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    hit = flag_value(job.script_args, _CONFIG_FLAGS)
    if hit is None:
        return
    if read_preset_file(r, cwd, hit[1], "deepspeed") is None:
        r.notes.append(f"deepspeed: {hit[0]} {hit[1]} not read")


defaults = base.no_defaults
edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
