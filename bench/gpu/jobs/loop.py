"""A plain training loop for the overhead section: GPT-2 small with random weights, bf16 autocast,
AdamW, one log line per step on stdout (what gpudoc tees). Writes the median step time (the first
``--warmup`` steps excluded) and the allocator's peaks as JSON to ``--out``.

    python3 loop.py --steps 150 --out loop.json [--device cpu --tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a two-layer model, for a rehearsal on the CPU")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from transformers import GPT2Config, GPT2LMHeadModel

    device = torch.device(args.device)
    shape = {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1024} if args.tiny else {}
    config = GPT2Config(n_positions=max(1024, args.seq), **shape)
    with device:
        model = GPT2LMHeadModel(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    times = []
    for step in range(args.steps):
        ids = torch.randint(config.vocab_size, (args.micro_batch_size, args.seq), device=device)
        start = time.perf_counter()
        with autocast:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        value = loss.item()  # synchronises, as a loop that logs its loss does
        times.append(time.perf_counter() - start)
        print(f"step {step} loss {value:.4f} {times[-1] * 1000:.1f} ms", flush=True)
    result = {
        "steps": args.steps,
        "seconds_per_step": statistics.median(times[args.warmup:] or times),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
    }
    with open(args.out, "w") as out:
        json.dump(result, out)
    print("done", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
