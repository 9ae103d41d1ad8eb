"""Whether a relaunch resumes from the job's newest complete checkpoint, and the line that says so.

A relaunch after an OOM (``--retry-oom``, ``fix --rerun``) resumes when the framework is known, a
complete checkpoint was written since the chain began (``gpudoc.job.checkpoints``), the global batch
is unchanged (micro x accumulation x world: the ladder's halving keeps it) and no knob changes what
the checkpoint holds (adapters, quantization, ZeRO's partitioning, the optimizer's state).
``[run] resume = false`` turns it off. The switch goes on the launched command only; the record's
``command`` stays the user's, and ``resumed_from`` says what was resumed.

Only a checkpoint this chain's own runs wrote is resumed from: each run records, when it ends, the
checkpoints written while it ran (``record_written``: their stamps, ``Checkpoint.stamp``), and a
relaunch takes the newest one still carrying a stamp its chain recorded. A checkpoint another job
put into the same ``output_dir`` since, or one rewritten, is not; one another user owns or can
write, or a link out of the output folder (``Checkpoint.problem``), is refused in one line.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.profiles.model import Profile

if TYPE_CHECKING:
    from gpudoc.commands.run_options import RunOptions
    from gpudoc.job.checkpoints import Checkpoint
    from gpudoc.runs.record import RunRecord
    from gpudoc.workspace import Workspace

# Knobs whose change makes a checkpoint unloadable or wrong to load: a new model or optimizer state.
STATE_KNOBS = ("lora_rank", "quantization", "zero_stage", "optimizer", "fsdp", "offload_optimizer", "offload_params")
# The checkpoints a run records (the newest): a relaunch resumes from the newest, and the frameworks
# keep a few (HF's save_total_limit) in any case.
_RECORDED = 20
# Refused checkpoints said one line each, up to this many (the rest counted in the last).
_SAID = 3
# A file's modification time against the run's recorded end (whole seconds in some file systems).
_SLACK_S = 2.0


def framework_of(profile: Profile) -> str | None:
    """The framework whose checkpoints the job writes, when gpudoc knows it."""
    from gpudoc.frameworks.registry import resumes

    framework = profile.job.framework if profile.job is not None else profile.bind.get("args")
    return str(framework) if isinstance(framework, str) and resumes(framework) else None


def record_written(record: RunRecord, profile: Profile, cwd: Path) -> None:
    """Put in ``record.checkpoints`` the stamps of the complete checkpoints written while the run
    ran that a relaunch may resume from (the trust rule passed): what "this chain's own" means."""
    from gpudoc.job.checkpoints import written_checkpoints

    framework = framework_of(profile)
    if framework is None or not bool(profile.run.get("resume", True)) or record.status == "ok":
        return  # only a failed run is relaunched
    ended = record.ended_epoch
    stamps = []
    for checkpoint in written_checkpoints(framework, record.command, cwd, since=record.started_epoch)[:_RECORDED]:
        stamp = checkpoint.stamp()
        if stamp is None or (ended is not None and stamp["mtime_ns"] > (ended + _SLACK_S) * 1e9):
            continue  # stamped after the run ended: not this run's save, whatever its clock says
        if checkpoint.problem() is None:
            stamps.append(stamp)
    record.checkpoints = stamps


def with_resume(options: RunOptions, record: RunRecord, after: Profile, ws: Workspace) -> RunOptions:
    """``options`` for the relaunch of the failed run ``record`` under ``after``: with ``resume`` set
    when it resumes (said on stderr), unchanged otherwise."""
    if not bool(after.run.get("resume", True)):
        return replace(options, resume=None)
    framework = framework_of(after)
    if framework is None:
        return replace(options, resume=None)
    checkpoint = _chain_checkpoint(framework, options, record, ws)
    if checkpoint is None:
        return replace(options, resume=None)
    where = f"{checkpoint.path} ({checkpoint.unit} {checkpoint.step})" if checkpoint.step is not None else checkpoint.path
    why = _why_not(record, after)
    if why:
        ws.console.error(f"gpudoc: not resuming from {where}: {why}; the relaunch starts over")
        return replace(options, resume=None)
    ws.console.error(f"gpudoc: resuming from {where}: {' '.join(checkpoint.switch())}")
    return replace(options, resume=checkpoint.to_dict())


def _chain_checkpoint(framework: str, options: RunOptions, record: RunRecord, ws: Workspace) -> Checkpoint | None:
    """The newest complete checkpoint written since the chain began that its runs recorded and the
    trust rule passes; the newer ones passed over are said (refused ones one line each)."""
    from gpudoc.job.checkpoints import written_checkpoints

    chain = _chain(record, ws)
    ours = [stamp for run in chain for stamp in run.checkpoints]
    refused: list[str] = []
    strangers: list[str] = []
    chosen = None
    for checkpoint in written_checkpoints(framework, options.command, ws.cwd, since=chain[-1].started_epoch):
        problem = checkpoint.problem()
        if problem is not None:
            refused.append(f"gpudoc: not resuming from {checkpoint.path}: {problem} ({problem.remedy})")
        elif checkpoint.stamp() not in ours:
            strangers.append(checkpoint.path)
        else:
            chosen = checkpoint
            break
    for line in refused[:_SAID]:
        ws.console.error(line)
    if len(refused) > _SAID:
        ws.console.error(f"gpudoc: ... and {len(refused) - _SAID} more checkpoint(s) refused the same way")
    if strangers:
        more = f" and {len(strangers) - 1} more" if len(strangers) > 1 else ""
        ws.console.error(f"gpudoc: not resuming from {strangers[0]}{more}: no run of this chain wrote it "
                         f"(another job's, or rewritten since); resume from it by hand if it is yours")
    return chosen


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


def _chain(record: RunRecord, ws: Workspace) -> list[RunRecord]:
    """The failed run and the runs before it in its chain, newest first: the last one's start is
    the chain's (checkpoints older than that belong to something else)."""
    seen, chain = {record.id}, [record]
    while chain[-1].parent and chain[-1].parent not in seen:
        parent = ws.store.record_or_none(chain[-1].parent)
        if parent is None:
            break
        seen.add(parent.id)
        chain.append(parent)
    return chain
