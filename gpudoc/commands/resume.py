"""Whether a relaunch resumes from the job's newest complete checkpoint, and the line that says so.

A relaunch after an OOM (``--retry-oom``, ``fix --rerun``) resumes when the framework is known, a
complete checkpoint was written since the chain began (``gpudoc.job.checkpoints``), the global batch
is unchanged (micro x accumulation x world: the ladder's halving keeps it) and no knob changes what
the checkpoint holds (adapters, quantization, ZeRO's partitioning, the optimizer's state).
``[run] resume = false`` turns it off. The switch goes on the launched command only; the record's
``command`` stays the user's, and ``resumed_from`` says what was resumed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpudoc.profiles.model import Profile

if TYPE_CHECKING:
    from gpudoc.commands.run_options import RunOptions
    from gpudoc.runs.record import RunRecord
    from gpudoc.workspace import Workspace

# Knobs whose change makes a checkpoint unloadable or wrong to load: a new model or optimizer state.
STATE_KNOBS = ("lora_rank", "quantization", "zero_stage", "optimizer", "fsdp", "offload_optimizer", "offload_params")


def with_resume(options: RunOptions, record: RunRecord, after: Profile, ws: Workspace) -> RunOptions:
    """``options`` for the relaunch of the failed run ``record`` under ``after``: with ``resume`` set
    when it resumes (said on stderr), unchanged otherwise."""
    from gpudoc.job.checkpoints import FRAMEWORKS, newest_checkpoint

    if not bool(after.run.get("resume", True)):
        return replace(options, resume=None)
    framework = after.job.framework if after.job is not None else after.bind.get("args")
    if framework not in FRAMEWORKS:
        return replace(options, resume=None)
    cwd = ws.cwd
    checkpoint = newest_checkpoint(str(framework), options.command, cwd, since=_chain_start(record, ws))
    if checkpoint is None:
        return replace(options, resume=None)
    where = f"{checkpoint.path} ({checkpoint.unit} {checkpoint.step})" if checkpoint.step is not None else checkpoint.path
    why = _why_not(record, after)
    if why:
        ws.console.error(f"gpudoc: not resuming from {where}: {why}; the relaunch starts over")
        return replace(options, resume=None)
    ws.console.error(f"gpudoc: resuming from {where}: {' '.join(checkpoint.switch())}")
    return replace(options, resume=checkpoint.to_dict())


def _why_not(record: RunRecord, after: Profile) -> str | None:
    before = Profile(name="", train=record.knobs, launch=record.launch, gpu=(record.profile or {}).get("gpu") or {})
    for knob in STATE_KNOBS:
        if before.train.get(knob) != after.train.get(knob):
            return f"{knob} changes ({before.train.get(knob)} -> {after.train.get(knob)}), which the checkpoint holds"
    old, new = _global(before), _global(after)
    if old != new:
        return f"the global batch changes ({old} -> {new})"
    return None


def _global(profile: Profile) -> Any:
    try:
        return profile.global_batch_size
    except (TypeError, ValueError):
        return None


def _chain_start(record: RunRecord, ws: Workspace) -> float | None:
    """When the chain's first run started: checkpoints older than that belong to something else."""
    seen, first = {record.id}, record
    while first.parent and first.parent not in seen:
        parent = ws.store.record_or_none(first.parent)
        if parent is None:
            break
        seen.add(parent.id)
        first = parent
    return first.started_epoch
