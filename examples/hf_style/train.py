"""A tiny causal LM trained with HF Trainer-style flags (CPU or GPU, a few seconds).

Reads its knobs the way `transformers.TrainingArguments` scripts do:
    --per_device_train_batch_size N  --gradient_accumulation_steps N
    --gradient_checkpointing [True|False]  --bf16 [True|False]  --fp16 [True|False]
    --max_seq_length N  [--deepspeed ds_config.json]
so gpudoc reads them from the command line with no profile at all, and edits them there. Works
under torchrun (gloo on CPU). FAKE_GPU_BUDGET simulates a small GPU (see ../fake_gpu.py): the
budget is in sample-tokens, micro batch x --max_seq_length, halved by checkpointing or 16-bit.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/fake_gpu.py
from fake_gpu import budget, check_memory


def str2bool(text):
    return str(text).lower() in ("true", "1", "yes", "y")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per_device_train_batch_size", type=int, default=8)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    # HfArgumentParser accepts both `--flag` and `--flag True`: so does this.
    for flag in ("--gradient_checkpointing", "--bf16", "--fp16"):
        p.add_argument(flag, type=str2bool, nargs="?", const=True, default=False)
    p.add_argument("--max_seq_length", type=int, default=32)
    p.add_argument("--max_steps", type=int, default=4)
    p.add_argument("--deepspeed", default=None)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class TinyLM(nn.Module):
    def __init__(self, vocab=128, dim=32, layers=2, checkpointing=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)
        self.checkpointing = checkpointing

    def forward(self, tokens):
        x = self.embed(tokens)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        for block in self.blocks:
            if self.checkpointing and self.training:
                x = checkpoint(block, x, mask, use_reentrant=False)
            else:
                x = block(x, src_mask=mask, is_causal=True)
        return self.head(x)


def main(argv=None):
    args = parse_args(argv)
    if args.bf16 and args.fp16:
        raise SystemExit("--bf16 and --fp16 are mutually exclusive")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    ds = {}
    if args.deepspeed:
        with open(args.deepspeed) as fh:
            ds = json.load(fh)
    torch.manual_seed(args.seed + rank)
    model = TinyLM(checkpointing=args.gradient_checkpointing)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    if rank == 0:
        print(f"knobs: micro_batch_size={args.per_device_train_batch_size} "
              f"gradient_accumulation_steps={args.gradient_accumulation_steps} "
              f"gradient_checkpointing={str(args.gradient_checkpointing).lower()} precision={precision} "
              f"max_seq_len={args.max_seq_length} world_size={world}"
              + (f" zero_stage={ds.get('zero_optimization', {}).get('stage')}" if ds else ""), flush=True)
    check_memory({"micro_batch_size": args.per_device_train_batch_size, "max_seq_len": args.max_seq_length,
                  "gradient_checkpointing": args.gradient_checkpointing, "precision": precision}, budget(), rank)
    for step in range(args.max_steps):
        for _ in range(args.gradient_accumulation_steps):
            tokens = torch.randint(0, 128, (args.per_device_train_batch_size, args.max_seq_length + 1))
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                logits = model(tokens[:, :-1])
                loss = nn.functional.cross_entropy(logits.float().reshape(-1, 128), tokens[:, 1:].reshape(-1))
            (loss / args.gradient_accumulation_steps).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step + 1}/{args.max_steps} loss {loss.item():.4f}", flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
