"""Real training steps on the GPU, measured by the allocator: the ground truth the estimate is held to.

Each case of the plan (a JSON list; ``bench/gpu/kit/grid.py`` writes it) builds its model from a
transformers config with random weights on the device (nothing downloaded), wraps it as the case says
(LoRA through peft, gradient checkpointing, pure bf16 or bf16 autocast), and runs ``steps`` AdamW steps
the way a plain training loop does: ``out = model(input_ids=x, labels=x); out.loss.backward();
opt.step(); opt.zero_grad(set_to_none=True)``. The peaks come from ``torch.cuda.max_memory_allocated``
and ``max_memory_reserved``: over the first step (no optimizer states yet), then, with the peak counters
reset, over the steps after it (the steady state). One JSON line per case is appended to the output
as soon as it is measured, so a time limit keeps what was done.

    python3 steps.py PLAN.json OUT.jsonl [--device cuda]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch

_HALF = {"bf16": torch.bfloat16, "bf16-true": torch.bfloat16}


def build(case: dict, device: torch.device) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(case["model_type"], **case["config"])
    precision = case["precision"]
    # The weights a user's loop holds: fp32 master weights under autocast, bf16 under pure bf16, and a
    # LoRA base in the compute dtype (loaded in bf16 and frozen), as gpudoc's simulation assumes.
    dtype = torch.float32
    if precision == "bf16-true" or (precision == "bf16" and case["lora_rank"]):
        dtype = torch.bfloat16
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if case["lora_rank"]:
        import peft

        lora = peft.LoraConfig(r=case["lora_rank"], lora_alpha=2 * case["lora_rank"], lora_dropout=0.0)
        model = peft.get_peft_model(model, lora)
    if case["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
        if case["lora_rank"]:
            model.enable_input_require_grads()  # frozen embeddings: the checkpointed blocks need a grad input
    model.train()
    return model


def measure(case: dict, device: torch.device) -> dict:
    model = build(case, device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    autocast = (torch.autocast(device.type, dtype=_HALF["bf16"]) if case["precision"] == "bf16"
                else nullcontext())
    vocab = int(case["config"]["vocab_size"])
    cuda = device.type == "cuda"
    phases, times = [], []
    for index in range(int(case["steps"])):
        if cuda and index in (0, 1):  # the first step alone, then every step after it
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(vocab, (case["micro_batch_size"], case["max_seq_len"]), device=device)
        start = time.perf_counter()
        with autocast:
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del out, ids
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if cuda and index == 0:
            phases.append(("first_step", torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()))
    if cuda:
        phases.append(("steady_state", torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()))
    result = {
        "id": case["id"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in params),
        "seconds_per_step": statistics.median(times[1:] or times),
        "allocated": {name: alloc for name, alloc, _ in phases},
        "reserved": {name: reserved for name, _, reserved in phases},
    }
    del model, optimizer, params
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    for case in json.loads(args.plan.read_text()):
        try:
            row = measure(case, device)
        except torch.OutOfMemoryError as exc:
            row = {"id": case["id"], "error": f"out of memory: {str(exc).splitlines()[0][:200]}"}
        except Exception as exc:  # one case's failure is its row, not the end of the grid
            row = {"id": case["id"], "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
