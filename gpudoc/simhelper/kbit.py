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
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

BLOCK = 64  # weights per absmax (bitsandbytes' 4-bit blocksize)
NESTED_BLOCK = 256  # absmax values per fp32 constant of the double quantization


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

    def __init__(self, linear: torch.nn.Linear, compute_dtype: Any) -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
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


def quantize_linears(model: Any, compute_dtype: Any) -> int:
    """Every linear layer of ``model`` but its output head as a ``Linear4bit`` (what transformers'
    ``load_in_4bit`` converts: the output embeddings stay in their dtype). Returns how many."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    converted = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child is not head:
                setattr(parent, name, Linear4bit(child, compute_dtype))
                converted += 1
    return converted
