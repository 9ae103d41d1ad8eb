"""The environment variables gpudoc's checks care about, and only those.

A snapshot must not carry secrets, so this is an allow-list (exact names and a few prefixes),
never the whole environment.
"""

from __future__ import annotations

from typing import Mapping

from gpudoc import allocator

RELEVANT = (
    # allocator
    *allocator.NAMES,
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    # device selection
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    # threads
    "TOKENIZERS_PARALLELISM",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    # performance-limiting / debugging CUDA switches
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_CACHE_DISABLE",
    "TORCH_USE_CUDA_DSA",
    "CUDA_MODULE_LOADING",
    "TORCH_SHOW_CPP_STACKTRACES",
    "TORCH_DISTRIBUTED_DEBUG",
    "TORCH_CPP_LOG_LEVEL",
    # distributed launch
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    # schedulers
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_NNODES",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_CPUS_PER_TASK",
    "SLURM_STEP_GPUS",
    "SM_CURRENT_HOST",
    "SM_NUM_GPUS",
    # terminal multiplexers (a run inside tmux survives a dropped ssh session)
    "TMUX",
    "STY",
)
RELEVANT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GPUDOC_")


def relevant_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The subset of ``environ`` that checks read, sorted by name for stable output."""
    wanted = set(RELEVANT)
    return {
        name: environ[name]
        for name in sorted(environ)
        if name in wanted or name.startswith(RELEVANT_PREFIXES)
    }
