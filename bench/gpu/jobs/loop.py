"""A plain training loop for the overhead section: a GPT-2-small-shaped decoder in plain PyTorch (no
framework import, so a run is mostly steps), random weights, bf16 autocast, AdamW, one log line per
step on stdout (what gpudoc tees). Writes the median step time (the first ``--warmup`` steps
excluded) and the allocator's peaks as JSON to ``--out``.

    python3 loop.py --steps 100 --out loop.json [--device cpu --tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for y in self.qkv(self.norm1(x)).split(c, dim=2))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, positions: int) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight
        for embedding in (self.tokens, self.positions):
            nn.init.normal_(embedding.weight, std=0.02)  # GPT-2's scale: unit-variance logits would swamp the loss

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a two-layer model, for a rehearsal on the CPU")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    device = torch.device(args.device)
    vocab, width, layers, heads = (1024, 64, 2, 2) if args.tiny else (50257, 768, 12, 12)
    with device:
        model = Decoder(vocab, width, layers, heads, max(1024, args.seq))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    times = []
    for step in range(args.steps):
        ids = torch.randint(vocab, (args.micro_batch_size, args.seq), device=device)
        start = time.perf_counter()
        with autocast:
            loss = model(ids)
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
