"""Shared builders for ladder tests: OOM diagnoses as the diagnose layer reports them, a small
analytic estimator passed in as a seam, and profiles built from plain dicts."""

from __future__ import annotations

from types import SimpleNamespace

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.facts.model import Facts, Gpu, HostFacts, TorchFacts
from gpudoc.profiles.model import Profile
from gpudoc.units import GIB, MIB


def oom(requested=2 * GIB, free=1 * GIB, total=22 * GIB, allocated=19 * GIB, frag=100 * MIB,
        others=(), gpu=0, rank=0, backend="cuda") -> Diagnosis:
    return Diagnosis(
        cause="gpu_oom", backend=backend, requested_bytes=requested, total_bytes=total, free_bytes=free,
        allocated_bytes=allocated, reserved_unallocated_bytes=frag, other_processes=tuple(others), gpu_index=gpu,
        rank=rank, exit_code=1, summary="CUDA out of memory",
    )


def profile(train=None, *, env=None, launch=None, ladder=None, gpu=None, name="test") -> Profile:
    return Profile(name=name, train=dict(train or {}), env=dict(env or {}), launch=dict(launch or {}),
                   ladder=dict(ladder or {}), gpu=dict(gpu or {}))


def facts(*, cc=None, name=None, ram=None, alloc=None, env=None) -> Facts:
    gpus = (Gpu(index=0, name=name, compute_capability=cc, memory_total_bytes=24 * GIB),)
    torch = TorchFacts(python="python3", ok=True, alloc_env_name=alloc) if alloc else None
    return Facts(collected_at="now", source="test", gpus=gpus, host=HostFacts(ram_available_bytes=ram),
                 torch=torch, env=dict(env or {}))


def fake_estimate(p: Profile, *, gpu_total_bytes=None, history=()):
    """Weights 2 GiB, AdamW states 8 GiB (sharded by ZeRO), activations 1 GiB per sample at 1024
    tokens, a quarter of that with checkpointing, half in 16-bit."""
    k = p.knobs
    world = p.world_size
    zero = int(k.get("zero_stage", 0))
    weights = 2 * GIB / (world if zero >= 3 else 1)
    grads = 2 * GIB / (world if zero >= 2 else 1)
    optim = 8 * GIB / (world if zero >= 1 else 1)
    if k.get("offload_optimizer"):
        optim = 0
    if k.get("offload_params"):
        weights = 0
    act = GIB * int(k.get("micro_batch_size", 1)) * int(k.get("max_seq_len", 1024)) / 1024
    if k.get("gradient_checkpointing") is True:
        act *= 0.25
    if k.get("precision", "fp32") != "fp32":
        act *= 0.5
    breakdown = {"weights": int(weights), "gradients": int(grads), "optimizer_states": int(optim),
                 "activations": int(act)}
    return SimpleNamespace(peak_bytes=sum(breakdown.values()), breakdown=breakdown)


def by_rung(result):
    return {s.rung: s for s in result.suggestions}


def no_estimate(p, **_kw):
    """An estimator that knows nothing: the ladder must fall back to its order."""
    return None
