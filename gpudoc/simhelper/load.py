"""Loading a 4-bit model, op for op on meta: each frozen weight is quantized on the GPU beside the
weights already there, and the quantization's temporaries can set the job's peak before any step.

- torchtune's QLoRA creates each frozen base as a bf16 ``nn.Linear`` on the GPU and quantizes it
  there with torchao's ``to_nf4`` (torchtune v0.1.0 ``torchtune/modules/peft/lora.py``,
  ``LoRALinear._create_weight_and_bias``), and again in ``load_state_dict``, whose NF4 ``copy_``
  moves the checkpoint's weight to the GPU first (``torchtune/utils/_register_nf4_dispatch_ops.py``).
  ``NF4Tensor.convert_to_norm_float_weight`` (torchao ``torchao/dtypes/nf4tensor.py``) scales the
  weight per block of 64 and finds each weight's nearest NF4 value through ``quantize_tensor_nearest``:
  ``(value.unsqueeze(-1) - nf4).abs()``, sixteen bf16 distances a weight, and the int64 index of the
  smallest. torchao 0.1 (torchtune 0.1 pins ``torchao==0.1``) ran it on the whole weight at once; from
  0.2 (pytorch/ao#196, "perform in chunks") on ``CHUNK_SIZE = 1024**2`` weights at a time, into a
  uint8 buffer.
- bitsandbytes (transformers' ``load_in_4bit``, ``Params4bit._quantize``): the half-precision weight
  is moved to the GPU and ``quantize_4bit`` packs it.
"""

from __future__ import annotations

from typing import Any

import torch

from .kbit import BLOCK, Linear4bit, LinearNF4

CHUNK = 1024**2  # torchao's CHUNK_SIZE, from 0.2


def torchao_chunks(version: str | None) -> bool:
    """Whether torchao ``version`` quantizes in chunks (0.2 and later; an unreadable one: the current way)."""
    try:
        major, minor = (int(part) for part in (version or "").split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= (0, 2)


def _nearest(value: Any, nf4: Any) -> Any:
    """``NF4Tensor.quantize_tensor_nearest``."""
    diff = (value.unsqueeze(-1) - nf4).abs()
    return diff.min(dim=-1).indices


def to_nf4(weight: Any, *, chunked: bool) -> Any:
    """torchao's ``NF4Tensor.from_tensor`` on a bf16 ``weight``, where it allocates: the per-block absmax
    (double quantization's first round), the scaled blocks, the nearest codes, and the packed bytes."""
    numel = weight.numel()
    nf4 = weight.new_empty(16)
    blocks = weight.flatten().view(numel // BLOCK, BLOCK)
    scalers = blocks.abs().max(dim=-1).values  # get_block_absmax
    scaled = (blocks / scalers.unsqueeze(-1)).flatten()
    if chunked:
        codes = torch.empty(numel, dtype=torch.uint8, device=weight.device)
        for start in range(0, numel, CHUNK):
            codes[start:start + CHUNK] = _nearest(scaled[start:start + CHUNK], nf4).to(torch.uint8)
    else:
        codes = _nearest(scaled, nf4)
    del scaled
    return (codes[::2] << 4 | codes[1::2]).to(torch.uint8)


def bnb_quantize(weight: Any) -> Any:
    """bitsandbytes' ``quantize_4bit`` of a half-precision ``weight`` on the GPU: packed codes and one
    absmax per block (a kernel: no temporaries of its own)."""
    numel = weight.numel()
    return (torch.empty((numel + 1) // 2, dtype=torch.uint8, device=weight.device),
            torch.empty(-(-numel // BLOCK), dtype=torch.float32, device=weight.device))


def quantize_largest(model: Any, tracker: Any, *, torchao_version: str | None) -> dict | None:
    """The load's peak: the model's weights (tracked already) with the largest 4-bit layer's weight
    created in bf16 and quantized as its library does. None for a model without 4-bit layers."""
    layers = [m for m in model.modules() if isinstance(m, (LinearNF4, Linear4bit))]
    if not layers:
        return None
    largest = max(layers, key=lambda m: m.in_features * m.out_features)
    torchao = isinstance(largest, LinearNF4)
    chunked = torchao_chunks(torchao_version)
    stage, tracker.stage = tracker.stage, "load"
    tracker.begin()
    weight = torch.empty(largest.out_features, largest.in_features, dtype=torch.bfloat16, device="meta")
    packed = to_nf4(weight, chunked=chunked) if torchao else bnb_quantize(weight)
    del weight, packed
    window = tracker.end()
    tracker.stage = stage
    library = ("torchao" if chunked else "torchao-0.1") if torchao else "bitsandbytes"
    return {"peak_bytes": window.peak_bytes, "weights_bytes": window.start_bytes,
            "temporaries_bytes": window.peak_bytes - window.start_bytes, "library": library,
            "largest": [largest.out_features, largest.in_features]}
