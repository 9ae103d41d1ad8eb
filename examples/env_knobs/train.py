"""A tiny transformer whose knobs come from gpudoc's GPUDOC_* environment (CPU or GPU).

    GPUDOC_MICRO_BATCH_SIZE, GPUDOC_GRADIENT_ACCUMULATION_STEPS, GPUDOC_MAX_SEQ_LEN,
    GPUDOC_GRADIENT_CHECKPOINTING (true/false), GPUDOC_PRECISION (fp32/bf16/fp16), GPUDOC_STEPS

Simulated GPU memory, for trying `gpudoc run --retry-oom` / `gpudoc fix` without a GPU: set
FAKE_GPU_BUDGET to the number of samples (or sample-tokens, when GPUDOC_MAX_SEQ_LEN is set)
that fit. Gradient checkpointing and 16-bit precision each halve the load, as they roughly halve
activation memory. A job over budget prints a real-format PyTorch (>= 2.2) CUDA OOM error on
stderr, with sizes derived from the knobs (FAKE_GPU_TOTAL_GIB, default 24), and exits 1.
"""

import os
import sys

GIB = 1024 ** 3
MIB = 1024 ** 2


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_bool(name, default=False):
    return os.environ.get(name, str(default)).strip().lower() in ("true", "1", "yes")


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


def main():
    knobs = {
        "micro_batch_size": env_int("GPUDOC_MICRO_BATCH_SIZE", 8),
        "gradient_accumulation_steps": env_int("GPUDOC_GRADIENT_ACCUMULATION_STEPS", 1),
        "max_seq_len": env_int("GPUDOC_MAX_SEQ_LEN", 0),
        "gradient_checkpointing": env_bool("GPUDOC_GRADIENT_CHECKPOINTING"),
        "precision": os.environ.get("GPUDOC_PRECISION", "fp32"),
    }
    budget = float(os.environ["FAKE_GPU_BUDGET"]) if os.environ.get("FAKE_GPU_BUDGET") else None
    rank = env_int("RANK", 0)
    if rank == 0:
        print("knobs: " + " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items()),
              flush=True)
    # Checked before torch is imported, so a simulated OOM costs milliseconds, not an import.
    check_memory(knobs, budget, rank)
    train(knobs, env_int("GPUDOC_STEPS", 3), env_int("WORLD_SIZE", 1), rank)
    return 0


def train(knobs, steps, world, rank):
    try:
        import torch
        from torch import nn
        from torch.utils.checkpoint import checkpoint
    except ImportError:
        print("train.py: this example trains a tiny model with PyTorch, which this Python lacks: "
              "`python -m pip install torch` (the CPU build is enough)", file=sys.stderr)
        raise SystemExit(2) from None

    if world > 1:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(rank)
    dim, vocab = 32, 64
    blocks = nn.ModuleList(nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True)
                           for _ in range(2))
    model = nn.ModuleDict({"embed": nn.Embedding(vocab, dim), "blocks": blocks, "head": nn.Linear(dim, vocab)})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(knobs["precision"].split("-")[0])
    seq = knobs["max_seq_len"] or 16
    for step in range(steps):
        for _ in range(knobs["gradient_accumulation_steps"]):
            tokens = torch.randint(0, vocab, (knobs["micro_batch_size"], seq + 1))
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                x = model["embed"](tokens[:, :-1])
                for block in model["blocks"]:
                    x = checkpoint(block, x, use_reentrant=False) if knobs["gradient_checkpointing"] else block(x)
                logits = model["head"](x).float()
                loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            (loss / knobs["gradient_accumulation_steps"]).backward()
        if world > 1:
            for p in model.parameters():
                torch.distributed.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f}", flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
