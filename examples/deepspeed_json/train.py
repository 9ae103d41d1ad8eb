"""A tiny MLP trained from a DeepSpeed-style JSON config (no deepspeed needed; CPU or GPU).

    python train.py --deepspeed_config ds_config.json [--steps N]

Reads train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size (checked
the way DeepSpeed checks it: micro x accumulation x world size), zero_optimization.stage and
its offload devices, and bf16.enabled / fp16.enabled. `[bind.files."ds_config.json"] =
"deepspeed"` in gpudoc.toml keeps the file in step with the profile.
"""

import argparse
import json
import os

import torch
from torch import nn


def load_config(path):
    with open(path) as fh:
        cfg = json.load(fh)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    micro = cfg.get("train_micro_batch_size_per_gpu")
    accum = cfg.get("gradient_accumulation_steps", 1)
    total = cfg.get("train_batch_size")
    if micro is None and isinstance(total, int):
        micro = total // (accum * world)
    for name, value in (("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", accum)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise SystemExit(f"{path}: {name} must be an integer here (got {value!r}); "
                             f"\"auto\" needs the HF Trainer to fill it")
    if isinstance(total, int) and total != micro * accum * world:
        raise SystemExit(f"{path}: train_batch_size {total} != {micro} * {accum} * {world}")
    zero = cfg.get("zero_optimization", {})
    precision = "bf16" if cfg.get("bf16", {}).get("enabled") is True else \
        "fp16" if cfg.get("fp16", {}).get("enabled") is True else "fp32"
    return {
        "micro_batch_size": micro,
        "gradient_accumulation_steps": accum,
        "zero_stage": zero.get("stage", 0),
        "offload_optimizer": zero.get("offload_optimizer", {}).get("device", "none") != "none"
        or bool(zero.get("cpu_offload")),
        "offload_params": zero.get("offload_param", {}).get("device", "none") != "none",
        "precision": precision,
        "world_size": world,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deepspeed_config", required=True)
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args(argv)
    knobs = load_config(args.deepspeed_config)
    rank = int(os.environ.get("RANK", "0"))
    if knobs["world_size"] > 1:
        torch.distributed.init_process_group("gloo")
    if rank == 0:
        print("knobs: " + " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items()),
              flush=True)
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1))
    if knobs["world_size"] > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(knobs["precision"])
    w = torch.randn(16, 1)
    for step in range(args.steps):
        for _ in range(knobs["gradient_accumulation_steps"]):
            x = torch.randn(knobs["micro_batch_size"], 16)
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                loss = nn.functional.mse_loss(model(x).float(), x @ w)
            (loss / knobs["gradient_accumulation_steps"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step + 1}/{args.steps} loss {loss.item():.4f}", flush=True)
    if knobs["world_size"] > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
