"""`gpudoc estimate`: the profile's peak memory per GPU, its breakdown and the largest micro batch."""

from __future__ import annotations

from pathlib import Path

from gpudoc.errors import ExitStatus, ProfileError, UsageError
from gpudoc.estimate.inputs import HF_CONFIG_HINT
from gpudoc.profiles.model import Profile
from gpudoc.profiles.schema import RANGES
from gpudoc.render.show import show
from gpudoc.results import EstimateResult
from gpudoc.units import GIB
from gpudoc.workspace import Workspace


def _detected_gpu_bytes(ws: Workspace) -> tuple[int | None, str | None]:
    """The smallest visible GPU's capacity via the facts layer; (None, None) when none is visible."""
    try:
        facts = ws.gather()
    except Exception:  # no driver, no NVML, no GPU: the estimate still stands
        return None, None
    gpus = [g for g in facts.gpus if g.memory_total_bytes]
    if not gpus:
        return None, None
    smallest = min(gpus, key=lambda g: g.memory_total_bytes or 0)
    return int(smallest.memory_total_bytes or 0), f"GPU {smallest.index} ({smallest.name or 'unknown'})"


def _job_model(ws: Workspace, profile: Profile, command: list[str]) -> tuple[Profile, str | None]:
    """The profile with the model its job names, when its [model] does not describe one: the job
    given on this command line, else the command of the profile's newest recorded run. A profile
    left without any [model] is one line saying what to set."""
    from gpudoc.estimate.model_source import needs_model, with_job_model

    if not needs_model(profile.model):
        return profile, None
    cwd, source = ws.cwd, "the job's command"
    if not command:
        runs = ws.history(profile)
        if runs:
            command, cwd, source = list(runs[-1].command), Path(runs[-1].cwd), f"the command of run {runs[-1].id}"
    profile, note = with_job_model(profile, command, cwd, ws.environ)
    if not profile.model:
        named = f"{source} names no model (--model_name_or_path, model.name_or_path=, ...)"
        if profile.path is None:  # no profile either: there is none to "set [model]" in yet
            asked = named if command else "no job command to read a model from (gpudoc estimate -- COMMAND)"
            raise ProfileError(f"no profile, and {asked}: a profile with {HF_CONFIG_HINT} or hidden, layers, "
                               "heads, vocab says it (`gpudoc estimate -p FILE -- COMMAND`)", key="model")
        asked = named if command else "no job command to read one from (gpudoc estimate -- COMMAND)"
        raise ProfileError(f"{profile.path}: no [model], and {asked}: set {HF_CONFIG_HINT} or hidden, layers, heads, "
                           "vocab", file=str(profile.path), key="model")
    return profile, note


def _job_as_it_is(ws: Workspace, profile: Profile, command: list[str]) -> tuple[Profile, list[str]]:
    """The job as `gpudoc run` reads it (``with_command``): with no profile, or one without
    ``[train]``, the knobs, launcher and model of the command given here; with no command, of the
    newest run launched that way (without a profile, or under this one); and what was read."""
    from gpudoc.profiles.from_job import describe, recorded_job_profile, with_command

    if command or (profile.path is not None and profile.train):
        read = with_command(profile, command, ws.cwd, ws.environ)
    else:
        latest = ws.history(profile)[-1:] if profile.path is not None else [ws.store.latest()]
        recorded = recorded_job_profile(latest[0], ws.environ) if latest and latest[0] is not None else None
        if recorded is None:
            return profile, []
        read = recorded
    return read, [line.removeprefix("note: ") for line in describe(read)]


LOGITS_NOTE = ("the logits dominate: a chunked or fused cross-entropy never holds them whole (HF Trainer: "
               "--use_liger_kernel with liger-kernel installed; torchtune: loss._component_ = "
               "torchtune.modules.loss.CEWithChunkedOutputLoss; Lightning or your own loop: Liger's "
               "LigerFusedLinearCrossEntropyLoss)")


def _logits_dominate(breakdown: dict[str, int]) -> bool:
    """The logits (and their loss) are the largest term and at least a quarter of the peak."""
    logits = breakdown.get("logits", 0)
    return logits > 0 and logits == max(breakdown.values()) and logits >= sum(breakdown.values()) / 4


def estimate_command(
    ws: Workspace,
    *,
    profile_name: str | None = None,
    as_json: bool = False,
    gpu_memory_gib: float | None = None,
    micro_batch_size: int | None = None,
    simulate: bool = False,
    python: str | None = None,
    command: list[str] | None = None,
) -> int:
    """Exit 0 with an estimate; 1 when the configuration does not fit the known GPU capacity.
    ``command``: the job's command line, read for its model when the profile has no [model]."""
    from dataclasses import replace

    console = ws.console

    # The switches take the bounds of the profile keys they stand for.
    low, high = RANGES[("gpu", "memory_gib")]
    if gpu_memory_gib is not None and not low <= gpu_memory_gib <= high:  # False for nan as well
        raise UsageError(f"gpudoc estimate: --gpu-memory {gpu_memory_gib:g}: expected a size in GiB, "
                         f"{low:g} to {high:g}")
    low, high = RANGES[("train", "micro_batch_size")]
    if micro_batch_size is not None and not low <= micro_batch_size <= high:
        raise UsageError(f"gpudoc estimate: --micro-batch-size {micro_batch_size}: expected {low:g} to {high:g}")
    profile = ws.load_profile(profile_name)
    profile, job_notes = _job_as_it_is(ws, profile, command or [])
    profile, model_note = _job_model(ws, profile, command or [])
    if micro_batch_size is not None:
        profile = profile.with_train({"micro_batch_size": micro_batch_size})

    gpu_bytes: int | None = None
    gpu_from = None
    if gpu_memory_gib is not None:
        gpu_bytes, gpu_from = int(gpu_memory_gib * GIB), "--gpu-memory"
    elif profile.gpu.get("memory_gib"):
        gpu_bytes, gpu_from = int(float(profile.gpu["memory_gib"]) * GIB), "[gpu] memory_gib"
    else:
        gpu_bytes, gpu_from = _detected_gpu_bytes(ws)

    estimator = ws.estimator(profile, simulate=simulate or python is not None, python=python, command=command)
    result = estimator(profile, gpu_total_bytes=gpu_bytes, history=ws.history(profile))
    if model_note or job_notes:
        result = replace(result, notes=[*job_notes, *([model_note] if model_note else []), *result.notes])
    if _logits_dominate(result.breakdown):
        result = replace(result, notes=[*result.notes, LOGITS_NOTE])
    # Above the target utilisation is a warning; only more than the card holds is a negative answer.
    status = ExitStatus.NEGATIVE if result.fit == "does_not_fit" else ExitStatus.OK
    return show(EstimateResult(result, profile.name, gpu_from, int(status)), console, as_json=as_json)
