"""NeMo (Megatron GPT): its YAML, which a profile binds (``[bind.files."conf.yaml"] = "nemo"``).

gpudoc does not recognise a NeMo job from its command; it writes the YAML a profile names. NeMo
derives accumulation from the global batch: ``global / (micro x data-parallel size)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import get, num
from gpudoc.frameworks import base, lightning
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.trainer_configs import read_simple
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading

name = "nemo"
arg_names: tuple[str, ...] = ()
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    return None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name


defaults = base.no_defaults
edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches
resolved = base.no_resolved
knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place


# -- its config file ---------------------------------------------------------------------------------
def write_file(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    if "micro_batch_size" in k:
        res.set(("model", "micro_batch_size"), int(k["micro_batch_size"]), "micro_batch_size")
    if "gradient_accumulation_steps" in k:
        # NeMo derives accumulation from global / (micro x data-parallel size).
        micro = int(k.get("micro_batch_size") or num(get(data, ("model", "micro_batch_size"))) or 1)
        res.set(("model", "global_batch_size"), base.global_batch(micro, k["gradient_accumulation_steps"], ctx.world_size),
                "gradient_accumulation_steps")
    if "max_seq_len" in k:
        res.set(("model", "encoder_seq_length"), int(k["max_seq_len"]), "max_seq_len")
    if "precision" in k:
        # Lightning reads 16/32 or a string ("bf16"): a number may become a string here.
        res.set(("trainer", "precision"), lightning.PRECISION_ANY_RELEASE[k["precision"]], "precision",
                any_type=True)
    gc = k.get("gradient_checkpointing")
    if gc is not None:
        gran = "selective" if gc == "selective" else "full" if gc else None
        # null switches checkpointing off, whatever granularity the file named.
        res.set(("model", "activations_checkpoint_granularity"), gran, "gradient_checkpointing", any_type=True)
        if gran == "full":
            res.set(("model", "activations_checkpoint_method"), "uniform", "gradient_checkpointing")
            res.set(("model", "activations_checkpoint_num_layers"), 1, "gradient_checkpointing")
    res.unsupported(k, ("zero_stage", "offload_optimizer", "offload_params", "lora_rank"),
                    lambda knob: f"nemo ({ctx.name}): no setting for {knob} in this preset")
    return res


def read_file(data: Any) -> dict[str, Any]:
    out = read_simple(data, {"micro_batch_size": "model.micro_batch_size", "max_seq_len": "model.encoder_seq_length"})
    out.pop("precision", None)
    return out


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """A NeMo config: ``trainer`` beside a ``model`` that holds the micro batch."""
    model = data.get("model")
    return suffix != ".py" and isinstance(data.get("trainer"), Mapping) and isinstance(model, Mapping) \
        and "micro_batch_size" in model


file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout)
