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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/fake_gpu.py
from fake_gpu import budget as fake_budget
from fake_gpu import check_memory


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_bool(name, default=False):
    return os.environ.get(name, str(default)).strip().lower() in ("true", "1", "yes")


def main():
    knobs = {
        "micro_batch_size": env_int("GPUDOC_MICRO_BATCH_SIZE", 8),
        "gradient_accumulation_steps": env_int("GPUDOC_GRADIENT_ACCUMULATION_STEPS", 1),
        "max_seq_len": env_int("GPUDOC_MAX_SEQ_LEN", 0),
        "gradient_checkpointing": env_bool("GPUDOC_GRADIENT_CHECKPOINTING"),
        "precision": os.environ.get("GPUDOC_PRECISION", "fp32"),
    }
    budget = fake_budget()
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
