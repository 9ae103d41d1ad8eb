"""`gpudoc estimate`: the profile's peak memory per GPU, its breakdown and the largest micro batch."""

from __future__ import annotations

from gpudoc.errors import ExitStatus, ProfileError, UsageError
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


def estimate_command(
    ws: Workspace,
    *,
    profile_name: str | None = None,
    as_json: bool = False,
    gpu_memory_gib: float | None = None,
    micro_batch_size: int | None = None,
    simulate: bool = False,
    python: str | None = None,
) -> int:
    """Exit 0 with an estimate; 1 when the configuration does not fit the known GPU capacity."""
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
    if not profile.model:
        where = profile.path or "the profile"
        raise ProfileError(
            f"{where}: no [model] table: set hidden, layers, heads, vocab (or hf_config = \"config.json\") "
            "so gpudoc can estimate memory"
        )
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

    estimator = ws.estimator(profile, simulate=simulate or python is not None, python=python)
    result = estimator(profile, gpu_total_bytes=gpu_bytes, history=ws.history(profile))
    status = ExitStatus.NEGATIVE if result.fits is False else ExitStatus.OK
    return show(EstimateResult(result, profile.name, gpu_from, int(status)), console, as_json=as_json)
