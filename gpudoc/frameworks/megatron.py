"""Megatron-LM's training scripts (``pretrain_gpt.py --micro-batch-size 1 --global-batch-size 64 ...``).

Its arguments are all flags (megatron/training/arguments.py). The global batch is the total over the
data-parallel ranks and Megatron derives the accumulation from it: ``global_batch_size //
(micro_batch_size x data-parallel size)``, asserting it divides (num_microbatches_calculator.py), the
data-parallel size being the world over the tensor, pipeline and context-parallel sizes. So
accumulation lives in ``--global-batch-size`` and is written there as micro x accumulation x
data-parallel ranks; without it the global batch is one micro batch per rank.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult, set_flags
from gpudoc.bind.filepresets import FilePreset
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.job import recognise as source
from gpudoc.job.argv import JobCommand
from gpudoc.job.identity import world
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import bool_flag, flag_value, knob_value

name = "megatron"
arg_names: tuple[str, ...] = ("megatron",)
trial_switches: base.TrialSwitches | None = None
file_preset: FilePreset | None = None
echo: tuple[tuple[str, str], ...] = ()  # its arguments dump: "  micro_batch_size ..... 1"
_MICRO, _GLOBAL, _SEQ = "--micro-batch-size", "--global-batch-size", "--seq-length"
# Its distributed optimizer (docs/source/distrib_optimizer.md) is ZeRO's stage 1: the optimizer's state
# over the data-parallel ranks, never the gradients or the parameters.
_DISTRIBUTED_OPTIMIZER = "--use-distributed-optimizer"
# Its activation recomputation: "full" with the "uniform" method over units of one layer checkpoints every
# Transformer layer (gradient_checkpointing = true); "selective" (also --recompute-activations) recomputes
# the attention core alone (Korthikanti et al. 2022, sec. 4.3: gpudoc's "selective" with eager attention).
_GRANULARITY, _METHOD, _UNIT = "--recompute-granularity", "--recompute-method", "--recompute-num-layers"
_SELECTIVE_SWITCH = "--recompute-activations"
_PARALLEL = (("tensor_parallel", "--tensor-model-parallel-size"), ("pipeline_parallel", "--pipeline-model-parallel-size"),
             ("context_parallel", "--context-parallel-size"))


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    args = job.script_args
    if flag_value(args, (_MICRO,)) is not None and flag_value(args, (_GLOBAL,)) is not None:
        return Recognition(True, f"{_MICRO} with {_GLOBAL}, Megatron-LM's own batch arguments")
    trees = source.job_sources(job, cwd)
    if any(isinstance(node, (ast.Import, ast.ImportFrom)) and _names_megatron(node) for tree in trees
           for node in ast.walk(tree)):
        return Recognition(True, "the script imports megatron")
    return None


def _names_megatron(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module or "").split(".")[0] == "megatron"
    return any(alias.name.split(".")[0] == "megatron" for alias in node.names)


defaults = base.no_defaults


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    r.framework = name
    args = job.script_args
    for knob, flag in (("micro_batch_size", _MICRO), ("max_seq_len", _SEQ)):
        hit = flag_value(args, (flag,))
        if hit is not None:
            r.set(knob, knob_value(knob, hit[1]), "argv", flag)
    bf16, fp16 = bool_flag(args, "--bf16"), bool_flag(args, "--fp16")
    r.set("precision", "bf16" if bf16 else "fp16" if fp16 else "fp32", "argv" if bf16 or fp16 else "default",
          "--bf16" if bf16 else "--fp16" if fp16 else name)
    _read_recompute(args, r)
    if bool_flag(args, _DISTRIBUTED_OPTIMIZER):  # the optimizer's fp32 copies and states sharded: ZeRO-1
        r.set("zero_stage", 1, "argv", _DISTRIBUTED_OPTIMIZER)
    parallel = {key: count for key, flag in _PARALLEL if (count := _count(flag_value(args, (flag,)))) and count > 1}
    r.launch.update(parallel)
    _accumulation(job, r, args, math.prod(parallel.values()))


def _read_recompute(args: list[str], r: JobReading) -> None:
    granularity, switch = flag_value(args, (_GRANULARITY,)), bool_flag(args, _SELECTIVE_SWITCH)
    if granularity is None and not switch:
        r.set("gradient_checkpointing", False, "default", name)
    elif granularity is None or granularity[1] == "selective":
        r.set("gradient_checkpointing", "selective", "argv", _GRANULARITY if granularity else _SELECTIVE_SWITCH)
    elif granularity[1] == "full":
        method, unit = flag_value(args, (_METHOD,)), _count(flag_value(args, (_UNIT,)))
        if method is not None and method[1] == "uniform" and unit == 1:
            r.set("gradient_checkpointing", True, "argv", _GRANULARITY)
        else:
            r.notes.append(f"megatron: {_GRANULARITY} full with {_METHOD} {method[1] if method else '(none)'} and "
                           f"{_UNIT} {unit if unit is not None else '(its default)'} checkpoints other than every layer: "
                           "gradient_checkpointing was not read")


def _recompute_flags(ed: ArgEdits, res: PresetResult, mode: Any) -> None:
    """``gradient_checkpointing`` as Megatron-LM's recomputation flags: every layer, the attention core
    alone, or none (the switch and the three flags all gone)."""
    if mode not in (True, False, "selective"):
        res.cannot["gradient_checkpointing"] = f"{name}: recomputes every layer, the attention core, or none; not {mode!r}"
        return
    ed.remove((_SELECTIVE_SWITCH,))
    if mode is True:
        ed.set_value((_GRANULARITY,), "full")
        ed.set_value((_METHOD,), "uniform")
        ed.set_value((_UNIT,), "1")
        res.expressed.add("gradient_checkpointing")
        return
    for flag in (_METHOD, _UNIT) + (() if mode == "selective" else (_GRANULARITY,)):
        ed.remove((flag,), boolean=False)
    if mode == "selective":
        ed.set_value((_GRANULARITY,), "selective")
    res.expressed.add("gradient_checkpointing")


def _count(hit: tuple[str, str] | None) -> int | None:
    try:
        return int(hit[1]) if hit is not None else None
    except ValueError:
        return None


def _accumulation(job: JobCommand, r: JobReading, args: list[str], model_parallel: int) -> None:
    micro = r.knobs.get("micro_batch_size")
    total = _count(flag_value(args, (_GLOBAL,)))
    if micro is None or not isinstance(micro.value, int):
        return
    if total is None:  # Megatron's default: one micro batch per data-parallel rank
        r.set("gradient_accumulation_steps", 1, "default", name)
        return
    ranks = world(job).world_size
    if ranks is None:
        r.notes.append(f"megatron: {_GLOBAL} {total} is divided over the data-parallel ranks, which the launcher "
                       "counts at start: gradient accumulation was not read")
        return
    data_parallel = ranks // model_parallel if ranks % model_parallel == 0 else 0
    if not data_parallel or total % (micro.value * data_parallel):
        r.notes.append(f"megatron: {_GLOBAL} {total} is not a multiple of {_MICRO} {micro.value} x {data_parallel or '?'} "
                       "data-parallel ranks: Megatron refuses it")
        return
    r.set("gradient_accumulation_steps", total // (micro.value * data_parallel), "argv", _GLOBAL)


def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    set_flags(ed, knobs, res, {"micro_batch_size": _MICRO, "max_seq_len": _SEQ})
    if "gradient_accumulation_steps" in knobs:
        said = [o.value for o in ed.find((_MICRO,)) if o.value is not None]
        micro = knobs.get("micro_batch_size", said[-1] if said else None)
        if micro is None:
            res.cannot["gradient_accumulation_steps"] = f"{name}: no {_MICRO} to derive {_GLOBAL} from"
        else:
            ed.set_value((_GLOBAL,), str(base.global_batch(micro, knobs["gradient_accumulation_steps"], ctx.world_size)))
            res.expressed.add("gradient_accumulation_steps")
    base.mixed_precision_flags(ed, res, knobs.get("precision"), name)
    stage = knobs.get("zero_stage")
    if stage in (0, 1):
        ed.set_bool((_DISTRIBUTED_OPTIMIZER,), stage == 1)
        res.expressed.add("zero_stage")
    elif stage is not None:
        res.cannot["zero_stage"] = (f"{name}: {_DISTRIBUTED_OPTIMIZER} shards the optimizer's state (ZeRO-1); no flag "
                                    f"shards its gradients or parameters (zero_stage = {stage})")
    if "gradient_checkpointing" in knobs:
        _recompute_flags(ed, res, knobs["gradient_checkpointing"])
    res.unsupported(knobs, ("offload_optimizer", "offload_params", "lora_rank"),
                    lambda knob: f"{name}: gpudoc writes no flag for {knob}")
    return res


step_limit = base.flag_step_limit("--train-iters")
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches
resolved = base.no_resolved
knob_values = base.no_knob_values
named_configs = base.no_named_configs
observed_place = base.no_observed_place
