"""The load of torchtune's Llama-2-7B QLoRA on a real GPU, against the estimate's load phase.

Built as torchtune 0.1's recipe builds it (``lora_finetune_single_device._setup_model``): every
frozen linear created in bf16 on the GPU and quantized there by torchao's ``to_nf4``, then
``load_state_dict`` moving each checkpoint weight from the host to the GPU and quantizing it again
(torchtune's NF4 ``copy_``). The quantization is ``gpudoc.simhelper.load.to_nf4``, the ops of
torchao's ``NF4Tensor.from_tensor`` — whole weights (torchao 0.1) or in chunks (0.2 on) — run here
on CUDA. Each mode in a fresh process: prints the allocator's peaks (allocated and reserved) and the
formula's load phase (``terms.nf4_load_bytes`` beside the weights).

    python3 bench/nf4_load.py [--layers 32] [--device cuda]

On an H100 80GB HBM3 (torch 2.11.0+cu130), 2026-11-28: whole weights (torchao 0.1) peak at 6.87 GB
allocated (the formula's load: 6.87 GB), 7.77 GB reserved; in chunks 4.10 GB allocated (formula
4.10 GB), 4.59 GB reserved. torchtune's tutorial reports 9.13 GB reserved after its 0.1 recipe's model
init (torch 2.2/2.3): 1.4 GB more than this build and load reserve.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HIDDEN, FFN, VOCAB, RANK = 4096, 11008, 32000, 8
SHAPES = [(HIDDEN, HIDDEN)] * 4 + [(FFN, HIDDEN), (HIDDEN, FFN), (FFN, HIDDEN)]  # q k v o, gate down up


def _measure(layers: int, device: str, chunked: bool) -> dict:
    import torch

    from gpudoc.simhelper.load import to_nf4

    cuda = device == "cuda"
    bf16 = torch.bfloat16
    kept: list = [torch.empty(VOCAB, HIDDEN, dtype=bf16, device=device)]  # tok_embeddings
    quantized: list = []
    for _ in range(layers):
        for out_f, in_f in SHAPES:
            weight = torch.nn.Linear(in_f, out_f, bias=False, device=device, dtype=bf16).weight.detach()
            quantized.append(to_nf4(weight, chunked=chunked))  # LoRALinear._create_weight_and_bias
            del weight
            kept += [torch.empty(RANK, in_f, dtype=bf16, device=device), torch.empty(out_f, RANK, dtype=bf16,
                                                                                     device=device)]
        kept += [torch.empty(HIDDEN, dtype=bf16, device=device) for _ in range(2)]  # the norms
    kept.append(torch.empty(VOCAB, HIDDEN, dtype=bf16, device=device))  # output, not quantized
    built = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()) if cuda else (0, 0)
    # load_state_dict: each checkpoint weight from the host, to the GPU, quantized again (the old freed).
    for index, (out_f, in_f) in enumerate(SHAPES * layers):
        host = torch.empty(out_f, in_f, dtype=bf16)
        quantized[index] = to_nf4(host.to(device), chunked=chunked)
    if cuda:
        torch.cuda.synchronize()
    held = sum(t.untyped_storage().nbytes() for t in kept + quantized)
    return {"chunked": chunked, "built_allocated": built[0], "built_reserved": built[1],
            "peak_allocated": torch.cuda.max_memory_allocated() if cuda else 0,
            "peak_reserved": torch.cuda.max_memory_reserved() if cuda else 0,
            "held_after": held, "torch": torch.__version__}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--one", choices=("whole", "chunks"))
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_measure(args.layers, args.device, args.one == "chunks")))
        return 0
    import importlib.util

    # The formula's terms alone (no other import of gpudoc's: the GPU machine has torch and little else).
    spec = importlib.util.spec_from_file_location("terms", REPO / "gpudoc" / "estimate" / "terms.py")
    if spec is None or spec.loader is None:
        raise ImportError("gpudoc/estimate/terms.py cannot be loaded")
    terms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(terms)
    largest = FFN * HIDDEN
    for mode, library in (("whole", "torchao-0.1"), ("chunks", "torchao")):
        done = subprocess.run([sys.executable, __file__, "--one", mode, "--layers", str(args.layers),
                               "--device", args.device], capture_output=True, text=True, check=True)
        got = json.loads(done.stdout.strip().splitlines()[-1])
        formula = got["held_after"] + terms.nf4_load_bytes(largest, library=library)
        print(f"{library:<12} weights {got['held_after'] / 1e9:6.2f} GB  formula load {formula / 1e9:6.2f} GB  "
              f"measured: built {got['built_allocated'] / 1e9:6.2f} allocated / {got['built_reserved'] / 1e9:6.2f} "
              f"reserved, after load_state_dict {got['peak_allocated'] / 1e9:6.2f} / {got['peak_reserved'] / 1e9:6.2f}"
              f"  (torch {got['torch']})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
