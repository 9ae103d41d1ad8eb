"""A script of its own under ``accelerate launch --config_file``: the config is all it says.

The config carries mixed precision, the DeepSpeed plugin and the process count; the HF Trainer and
the YAML-driven trainers read it too (``accelerate_config``), under their own knobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpudoc.bind.filecontext import count, get, num
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.presetfiles import follow_deepspeed, read_preset_file
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading

name = "accelerate"
arg_names: tuple[str, ...] = ()  # a profile's `[bind] args = "accelerate"` is the Trainer's flags (hf_trainer)


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    if job.launcher == "accelerate" and job.options.get("--config_file"):
        return Recognition(False, "accelerate launch --config_file")
    return None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    accelerate_config(job, cwd, r, trainer=False)


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
        follow_deepspeed(r, cwd, label, plugin.get("deepspeed_config_file"), "deepspeed_config_file")


defaults = base.no_defaults
edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
