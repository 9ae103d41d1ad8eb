"""Simulated GPU memory for the examples, so `gpudoc run --retry-oom` and `gpudoc fix` can be tried
without a GPU: FAKE_GPU_BUDGET is the number of samples (or sample-tokens, when a sequence length is
set) that fit. Gradient checkpointing and 16-bit precision each halve the load, as they roughly halve
activation memory. A job over budget raises a real-format PyTorch (>= 2.2) CUDA OOM error, with sizes
derived from the knobs (FAKE_GPU_TOTAL_GIB, default 24). Needs nothing but the standard library.
"""

import os

GIB = 1024 ** 3
MIB = 1024 ** 2


def format_size(n):
    """PyTorch's CUDACachingAllocator format_size."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


class OutOfMemoryError(RuntimeError):
    pass


# The uncaught traceback then ends in "torch.OutOfMemoryError: CUDA out of memory. ...", as a real one does.
OutOfMemoryError.__module__ = "torch"


def simulated_load(knobs):
    load = knobs["micro_batch_size"] * (knobs["max_seq_len"] or 1)
    if knobs["gradient_checkpointing"]:
        load /= 2
    if knobs["precision"] in ("bf16", "fp16", "bf16-true", "fp16-true"):
        load /= 2
    return load


def oom_message(knobs, budget, device=0):
    total = int(float(os.environ.get("FAKE_GPU_TOTAL_GIB", "24")) * GIB)
    per_unit = int(total * 0.9 / budget)
    requested = max(int((simulated_load(knobs) - budget) * per_unit), 2 * MIB)
    alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
    fragmented = "expandable_segments:true" not in alloc_conf.replace(" ", "").lower()
    reserved_unallocated = min(requested // 4, int(total * 0.02)) if fragmented else min(requested // 16, 20 * MIB)
    free = min(requested // 2, int(total * 0.02))
    in_use = total - free
    non_pytorch = 512 * MIB  # CUDA context and friends
    allocated = in_use - non_pytorch - reserved_unallocated
    return (f"CUDA out of memory. Tried to allocate {format_size(requested)}. GPU {device} has a total capacity of "
            f"{format_size(total)} of which {format_size(free)} is free. Including non-PyTorch memory, this process "
            f"has {format_size(in_use)} memory in use. Of the allocated memory {format_size(allocated)} is allocated "
            f"by PyTorch, and {format_size(reserved_unallocated)} is reserved by PyTorch but unallocated. If reserved "
            f"but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            f"fragmentation.  See documentation for Memory Management  "
            f"(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def check_memory(knobs, budget, rank):
    """The simulated allocator: over budget, the activations of this micro batch do not fit."""
    if budget is not None and simulated_load(knobs) > budget:
        raise OutOfMemoryError(oom_message(knobs, budget, device=int(os.environ.get("LOCAL_RANK", rank))))


def budget():
    """FAKE_GPU_BUDGET, or None (no simulated limit)."""
    return float(os.environ["FAKE_GPU_BUDGET"]) if os.environ.get("FAKE_GPU_BUDGET") else None
