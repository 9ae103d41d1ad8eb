"""The seed guides' shape: a hand-written loop whose micro batch is its DataLoader's and whose
gradient accumulation lives in its own code, on one process or under torchrun (gloo). ``--oom-at
PHASE:STEP`` raises a real ``torch.OutOfMemoryError`` inside that phase of that optimizer step.
``--config FILE`` (YAML, read with PyYAML) sets ``batch`` and ``accum`` under ``train:``; the flags win.
``--output_dir`` is where it writes its progress after each optimizer step, as the seed jobs write
theirs (the flag makes no job an HF Trainer's).
``--progress`` draws tqdm's bar over the optimizer steps on stderr, as many hand-written loops do.
``--compile`` trains through ``torch.compile`` (the aot_eager backend: dynamo and AOTAutograd, no C compiler).
``--oom-above TOKENS``: from the second optimizer step on, a forward whose micro batch holds more
tokens runs out of memory (memory that grew after the first step): a smaller micro batch fits."""

import argparse
import os

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--config", default="")
parser.add_argument("--output_dir", default="out")
parser.add_argument("--batch", type=int)
parser.add_argument("--accum", type=int)
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--seq", type=int, default=16)
parser.add_argument("--bf16", action="store_true", help="train under CPU autocast in bfloat16")
parser.add_argument("--oom-at", default="")
parser.add_argument("--oom-above", type=int, default=0)
parser.add_argument("--progress", action="store_true")
parser.add_argument("--compile", action="store_true")
args = parser.parse_args()
if args.config:
    import yaml

    with open(args.config) as f:
        train = yaml.safe_load(f)["train"]
    args.batch = args.batch or train["batch"]
    args.accum = args.accum or train["accum"]
args.batch, args.accum = args.batch or 4, args.accum or 3
torch.manual_seed(0)
if "RANK" in os.environ:
    torch.distributed.init_process_group("gloo")
model = nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(32 * args.seq, 100))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
forward = torch.compile(model, backend="aot_eager") if args.compile else model
data = torch.utils.data.DataLoader(torch.randint(100, (64, args.seq)), batch_size=args.batch)
phase, at = args.oom_at.split(":") if args.oom_at else ("", "-1")


def out_of_memory(*_):
    # Sized from the actual input, as the allocator words it.
    raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.numel() * 4 * 2**20} bytes")


step = 0
if args.progress:
    from tqdm import tqdm

    bar = tqdm(total=args.steps, mininterval=0, miniters=1)  # every step drawn, however quick
for i, x in enumerate(data):
    if (phase == "forward" and step == int(at)) or (args.oom_above and step >= 1 and x.numel() > args.oom_above):
        model[2].register_forward_hook(out_of_memory)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        out = forward(x)
    loss = out.float().logsumexp(-1).mean()
    if phase == "backward" and step == int(at):
        out.register_hook(out_of_memory)
    (loss / args.accum).backward()
    if (i + 1) % args.accum == 0:
        if phase == "optimizer" and step == int(at):
            optimizer.register_step_pre_hook(out_of_memory)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        print(f"step {step} loss {loss.item():.3f}", flush=True)
        if args.progress:
            bar.update(1)
        os.makedirs(args.output_dir, exist_ok=True)
        with open(os.path.join(args.output_dir, "progress.txt"), "w") as f:
            f.write(f"{step}\n")
        if step >= args.steps:
            break
