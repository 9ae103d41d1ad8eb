"""Environment variables that slow a job down, hang it, or oversubscribe the CPU."""

from __future__ import annotations

import re

from gpudoc.checks._common import (
    CheckContext,
    effective_env,
    has_profile,
    is_multi_process,
    procs_per_node,
    set_remedy,
    truthy,
    unset_remedy,
)
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile

TOKENIZERS = "env.tokenizers-parallelism"
OMP = "env.omp-threads"
CUDA_DEBUG = "env.cuda-launch-blocking"
NCCL = "env.nccl-fail-fast"

# Variables that make every step slower (debug switches left on from an earlier investigation).
# value: (why it hurts, severity when on)
SLOW_VARS = {
    "CUDA_LAUNCH_BLOCKING": ("every kernel launch waits for the GPU: training runs several times slower", Severity.WARN),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": ("the caching allocator is off: every tensor is a cudaMalloc/cudaFree, "
                                       "much slower, and memory use differs from a normal run", Severity.WARN),
    "CUDA_CACHE_DISABLE": ("the CUDA JIT cache is off: PTX is recompiled at every start", Severity.WARN),
    "TORCH_USE_CUDA_DSA": ("device-side assertions add checks to every kernel (when torch was built with them)", Severity.INFO),
}
# Variables with a debug value that costs time; (value pattern, why).
SLOW_VALUES = {
    "TORCH_DISTRIBUTED_DEBUG": (r"(?i)detail", "DETAIL checks every collective's shapes across ranks"),
    "NCCL_DEBUG": (r"(?i)trace", "TRACE logs every NCCL call"),
    "CUDA_MODULE_LOADING": (r"(?i)eager", "EAGER loads every kernel at start: slower start-up and more GPU memory "
                                           "than the default LAZY"),
    "TORCH_NCCL_DESYNC_DEBUG": (r"1|(?i:true)", "desync debugging adds work to every collective"),
}

_TOKENIZERS_OFF = ("", "off", "false", "f", "no", "n", "0")


def check_tokenizers(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    env = effective_env(facts, profile)
    value = env.get("TOKENIZERS_PARALLELISM")
    if value is None:
        return Finding(
            TOKENIZERS, Severity.INFO, "TOKENIZERS_PARALLELISM unset",
            "with DataLoader workers, Hugging Face tokenizers used before fork() print a warning per "
            "worker and turn parallelism off; set it to say what you want",
            "export TOKENIZERS_PARALLELISM=false", ("TOKENIZERS_PARALLELISM",),
        )
    if value.strip().lower() in _TOKENIZERS_OFF:
        return Finding(TOKENIZERS, Severity.OK, f"TOKENIZERS_PARALLELISM={value}")
    return Finding(
        TOKENIZERS, Severity.WARN, f"TOKENIZERS_PARALLELISM={value}: tokenizer threads in every DataLoader worker",
        "tokenizers' thread pool survives fork() badly: workers can deadlock, and N workers x all cores "
        "oversubscribe the CPU",
        set_remedy("TOKENIZERS_PARALLELISM", "false", profile, ctx), ("TOKENIZERS_PARALLELISM",),
    )


def check_omp(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    env = effective_env(facts, profile)
    cores = facts.host.cpu_count if facts.host else None
    procs = procs_per_node(profile) or 1
    value = env.get("OMP_NUM_THREADS")
    share = max((cores or 1) // procs, 1)
    if cores is None:
        return Finding(OMP, Severity.SKIP, "CPU count N/A", "host facts do not say how many CPUs this process may use",
                       "nproc  # then export OMP_NUM_THREADS=<cores / processes per node>")
    if value is None:
        if procs > 1:
            return Finding(
                OMP, Severity.INFO, f"OMP_NUM_THREADS unset: torchrun sets it to 1 for each of {procs} processes",
                f"{cores} usable CPUs / {procs} processes = {share} threads each; 1 starves CPU-side work (data "
                "loading transforms, CPU offload)",
                f"export OMP_NUM_THREADS={share}", ("OMP_NUM_THREADS",),
            )
        return Finding(OMP, Severity.OK, f"OMP_NUM_THREADS unset: one process uses all {cores} CPUs")
    if not re.fullmatch(r"\s*\d+\s*", value) or int(value) < 1:
        return Finding(
            OMP, Severity.WARN, f"OMP_NUM_THREADS={value!r} is not a positive whole number",
            "OpenMP ignores it (torch warns) and uses every core in every process",
            set_remedy("OMP_NUM_THREADS", str(share), profile, ctx), ("OMP_NUM_THREADS",),
        )
    threads = int(value)
    if threads * procs > cores:
        return Finding(
            OMP, Severity.WARN,
            f"OMP_NUM_THREADS={threads} x {procs} process(es) = {threads * procs} threads on {cores} usable CPUs",
            "oversubscribed CPU threads spin against each other: data loading and CPU ops slow down",
            set_remedy("OMP_NUM_THREADS", str(share), profile, ctx), ("OMP_NUM_THREADS",),
        )
    return Finding(OMP, Severity.OK, f"OMP_NUM_THREADS={threads} x {procs} process(es) on {cores} usable CPUs")


def check_cuda_debug(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    env = effective_env(facts, profile)
    out: list[Finding] = []
    for name, (why, severity) in SLOW_VARS.items():
        value = env.get(name)
        if truthy(value):
            out.append(Finding(CUDA_DEBUG, severity, f"{name}={value}: {why.split(':')[0]}", why,
                               unset_remedy(name, profile, ctx), (name,)))
    for name, (pattern, why) in SLOW_VALUES.items():
        value = env.get(name)
        if value is not None and re.fullmatch(pattern, value.strip()):
            out.append(Finding(CUDA_DEBUG, Severity.WARN, f"{name}={value} slows the job", why,
                               unset_remedy(name, profile, ctx), (name,)))
    if not out:
        out.append(Finding(CUDA_DEBUG, Severity.OK, "no debugging or performance-limiting CUDA variable set"))
    return out


# Deprecated spellings torch still reads (with a warning) -> the current name.
_NCCL_RENAMED = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}


def check_nccl(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    if not has_profile(profile):
        return [Finding(NCCL, Severity.SKIP, "NCCL fail-fast: no profile says how many processes the job runs",
                        "applies to multi-process jobs", "gpudoc check -p PROFILE")]
    if not is_multi_process(profile):
        return [Finding(NCCL, Severity.SKIP, "NCCL fail-fast: single-process job", "no collectives to hang")]
    env = effective_env(facts, profile)
    out: list[Finding] = []
    for old, new in _NCCL_RENAMED.items():
        if old in env and new not in env:
            out.append(Finding(NCCL, Severity.INFO, f"{old} is the deprecated name of {new}",
                               "torch reads it with a warning", f"export {new}={env[old]}; unset {old}", (old,)))
    handling = env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", env.get("NCCL_ASYNC_ERROR_HANDLING"))
    if handling is not None and handling.strip() == "0":
        out.append(Finding(
            NCCL, Severity.WARN, "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a failed rank leaves the others hanging",
            "with error handling off, the surviving ranks wait in their collective until the NCCL timeout "
            "(10 minutes by default) instead of aborting",
            set_remedy("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", profile, ctx), ("TORCH_NCCL_ASYNC_ERROR_HANDLING",),
        ))
    if env.get("TORCH_NCCL_ENABLE_MONITORING", "").strip() == "0":
        out.append(Finding(
            NCCL, Severity.WARN, "TORCH_NCCL_ENABLE_MONITORING=0: a stuck watchdog is never detected",
            "the heartbeat monitor is what kills a rank whose NCCL watchdog hangs",
            unset_remedy("TORCH_NCCL_ENABLE_MONITORING", profile, ctx), ("TORCH_NCCL_ENABLE_MONITORING",),
        ))
    blocking = env.get("TORCH_NCCL_BLOCKING_WAIT", env.get("NCCL_BLOCKING_WAIT"))
    if truthy(blocking):
        out.append(Finding(
            NCCL, Severity.INFO, "TORCH_NCCL_BLOCKING_WAIT=1: the CPU waits on every collective",
            "errors surface as exceptions after the timeout, at the cost of CPU/GPU overlap; asynchronous "
            "error handling gives the same fail-fast without the stall",
            unset_remedy("TORCH_NCCL_BLOCKING_WAIT", profile, ctx), ("TORCH_NCCL_BLOCKING_WAIT",),
        ))
    if not any(f.severity is Severity.WARN for f in out):
        out.append(Finding(
            NCCL, Severity.OK, f"NCCL fails fast ({profile.world_size} processes)",
            "asynchronous error handling on (torch's default); the collective timeout is the job's "
            "init_process_group(timeout=...), 10 minutes by default; gpudoc run ends the whole job shortly "
            "after one rank hits an OOM",
        ))
    return out
