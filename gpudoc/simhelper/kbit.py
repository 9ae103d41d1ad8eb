"""bitsandbytes' 4-bit linear layers (``Linear4bit``, NF4, double quantization) on the meta device.

bitsandbytes has no meta kernels, but what its layer holds and what its autograd function keeps are
plain tensors, so a stand-in holds the same bytes for as long:
- the weight: packed, two 4-bit codes per byte (uint8, out x in / 2), frozen;
- its quantization state with double quantization (QLoRA sec. 3, the common setting): one uint8
  absmax per block of 64 weights and one fp32 constant per 256 of those blocks;
- forward (``Linear4bit.forward``): the input cast to the compute dtype, then ``MatMul4Bit``: the
  weight dequantized to that dtype (a transient of out x in), ``linear``, and the output cast back
  to the input's dtype. ``MatMul4Bit`` keeps ``ctx.tensors = (A, B)``, the input and the packed
  weight, whenever either needs a gradient (bitsandbytes/autograd/_functions.py): the cast input
  stays live until backward has run. Kept here as saved tensors, so that gradient checkpointing
  drops and recomputes them as it does under reentrant checkpointing (peft's
  ``prepare_model_for_kbit_training`` default), where the forward builds no graph to hold them;
- backward: the weight dequantized again (transient) for the input's gradient; the frozen packed
  weight gets none.

torchao's ``NF4Tensor`` (torchtune's QLoRA: ``to_nf4``, ``linear_nf4``) holds as much — packed codes,
an int8 scaler per block of 64, a scaler factor per 256 blocks — but differs in the step:
- ``LinearNF4`` saves only the NF4 weight for backward, never the input;
- the dequantization (``weight.to(dtype)``: ``NF4Tensor.get_original_weight``) is eager PyTorch, not a
  kernel: both halves of the codes as int64 index tensors (8 bytes a weight between them), the looked-up
  values, each half scaled and the two stacked — about 14 bytes a weight at once, in forward and again
  in backward, where bitsandbytes writes the 2-byte weight directly.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

BLOCK = 64  # weights per absmax (bitsandbytes' 4-bit blocksize)
NESTED_BLOCK = 256  # absmax values per fp32 constant of the double quantization


def _features(layer: Any) -> tuple[int, int]:
    """(in, out) of a ``torch.nn.Linear`` or of transformers' ``Conv1D``, whose weight is stored
    transposed (in x out)."""
    if isinstance(layer, torch.nn.Linear):
        return layer.in_features, layer.out_features
    fan_in, fan_out = layer.weight.shape
    return int(fan_in), int(fan_out)


class _MatMul4Bit(torch.autograd.Function):
    """``bnb.matmul_4bit`` as its autograd function runs it in training."""

    @staticmethod
    def forward(ctx: Any, A: Any, packed: Any, shape: tuple[int, int], bias: Any) -> Any:
        weight = A.new_empty(shape)  # dequantize_4bit(B).to(A.dtype): freed when the matmul is done
        out = F.linear(A, weight, bias)
        del weight
        ctx.shape = shape
        ctx.has_bias = bias is not None
        if any(ctx.needs_input_grad[:2]):
            ctx.save_for_backward(A, packed)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        grad_a = grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = grad.sum(0)
        if ctx.needs_input_grad[0]:
            grad_a = torch.matmul(grad, grad.new_empty(ctx.shape))  # dequantized again, transient
        return grad_a, None, None, grad_bias


class Linear4bit(torch.nn.Linear):
    """A ``torch.nn.Linear`` to peft (which wraps it as it wraps bitsandbytes' own), holding the
    packed weight and its quantization state instead of a floating-point weight."""

    def __init__(self, linear: Any, compute_dtype: Any) -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = _features(linear)
        numel = self.in_features * self.out_features
        device = linear.weight.device
        self.weight = torch.nn.Parameter(torch.empty((numel + 1) // 2, 1, dtype=torch.uint8, device=device),
                                         requires_grad=False)
        blocks = -(-numel // BLOCK)
        self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=device))
        self.register_buffer("nested_absmax", torch.empty(-(-blocks // NESTED_BLOCK), dtype=torch.float32,
                                                          device=device))
        self.bias = None if linear.bias is None else torch.nn.Parameter(
            linear.bias.detach().to(compute_dtype), requires_grad=False)
        self.compute_dtype = compute_dtype

    def forward(self, x: Any) -> Any:
        dtype = x.dtype
        out = _MatMul4Bit.apply(x.to(self.compute_dtype), self.weight, (self.out_features, self.in_features),
                                self.bias)
        return out.to(dtype)


def _nf4_dequantized(layer: LinearNF4, dtype: Any) -> Any:
    """``NF4Tensor.get_original_weight`` op for op (torchao/dtypes/nf4tensor.py): what it allocates."""
    first = (layer.weight >> 4).to(torch.long)
    second = (layer.weight & 0b1111).to(torch.long)
    table = layer.nf4.to(dtype)
    first_values, second_values = table[first], table[second]
    blocks = layer.scalers.numel()
    scalers = (layer.scalers.view(-1, NESTED_BLOCK) / layer.factors.unsqueeze(-1)).flatten().to(dtype)
    repeated = scalers.unsqueeze(-1).expand(blocks, BLOCK // 2)
    scaled_first = (first_values * repeated.flatten()).unsqueeze(-1).transpose(0, 1)
    scaled_second = (second_values * repeated.flatten()).unsqueeze(-1).transpose(0, 1)
    return torch.stack([scaled_first, scaled_second], dim=-1).reshape(layer.out_features, layer.in_features)


class _LinearNF4(torch.autograd.Function):
    """torchao's ``LinearNF4``: the NF4 weight, and only it, saved for backward."""

    @staticmethod
    def forward(ctx: Any, input: Any, layer: Any) -> Any:
        ctx.layer = layer  # ctx.save_for_backward(weight): the layer's own NF4 weight, no new storage
        return F.linear(input, _nf4_dequantized(layer, input.dtype))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad @ _nf4_dequantized(ctx.layer, grad.dtype), None


class LinearNF4(torch.nn.Linear):
    """torchtune's frozen NF4 base layer (``FrozenNF4Linear``, ``LoRALinear(quantize_base=True)``): an
    ``NF4Tensor`` weight's inner tensors, in torchao's dtypes."""

    def __init__(self, linear: Any, compute_dtype: Any) -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = _features(linear)
        numel = self.in_features * self.out_features
        device = linear.weight.device
        blocks = numel // BLOCK
        self.weight = torch.nn.Parameter(torch.empty(numel // 2, dtype=torch.uint8, device=device),
                                         requires_grad=False)  # quantized_data
        self.register_buffer("scalers", torch.empty(blocks, dtype=torch.int8, device=device))
        self.register_buffer("factors", torch.empty(max(1, blocks // NESTED_BLOCK), dtype=compute_dtype,
                                                    device=device))
        self.register_buffer("nf4", torch.empty(16, dtype=compute_dtype, device=device))
        self.bias = None if linear.bias is None else torch.nn.Parameter(
            linear.bias.detach().to(compute_dtype), requires_grad=False)

    def forward(self, x: Any) -> Any:
        out = _LinearNF4.apply(x, self)
        return out if self.bias is None else out + self.bias


def quantize_linears(model: Any, compute_dtype: Any, *, torchao: bool = False) -> int:
    """Every linear layer of ``model`` but its output head as a ``Linear4bit`` (what transformers'
    ``load_in_4bit`` converts: the output embeddings stay in their dtype; GPT-2's ``Conv1D`` layers
    too, which transformers' bitsandbytes integration replaces as linear layers), or with ``torchao`` as a
    ``LinearNF4`` (torchtune's 7B QLoRA recipes put LoRA, and so NF4, on every linear layer but the
    output). Returns how many."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    converted = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if (type(child) is torch.nn.Linear or type(child).__name__ == "Conv1D") and child is not head:
                setattr(parent, name, (LinearNF4 if torchao else Linear4bit)(child, compute_dtype))
                converted += 1
    return converted
