"""Where the meta device behaves unlike CUDA, make it behave like CUDA.

Each emulation is a global patch of a ``torch`` function, installed for the whole simulated step
and removed after: a ``TorchFunctionMode`` would not be active when gradient checkpointing
recomputes a layer inside backward, and the recomputation would then save other tensors than the
forward did. Every emulation can be switched off on its own (the tests measure each one).

- dropout: CPU/meta compute ``input * bernoulli_mask`` and save a mask of the input's dtype; CUDA's
  fused ``native_dropout`` saves a 1-byte bool mask.
- scaled_dot_product_attention: meta takes the math path (the s x s scores are materialised and
  saved); CUDA picks flash attention for fp16/bf16 without a mask, else memory-efficient attention.
- grouped_mm (mixture-of-experts layers): meta accepts bf16 only; CUDA runs other dtypes (the fp32
  experts of mixed precision) through its fallback kernel. Here: the output of the bf16 kernel's
  shape in the inputs' dtype, both inputs saved for backward, a gradient of each input's shape.
- autocast: ``torch.autocast("cuda")`` disables itself off CUDA. The CUDA cast policy (matmuls in
  the low dtype, softmax/norms/losses in fp32) and its cache of weight casts (a trainable leaf is
  cast once per autocast region) are applied here instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes

# CUDA autocast's lists (torch/csrc/autograd/autocast_mode.cpp), the functions models reach them by.
_LOW_PRECISION = {
    F: ("linear", "conv1d", "conv2d", "conv3d", "bilinear"),
    torch: ("matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "chain_matmul", "einsum"),
    torch.Tensor: ("matmul", "__matmul__", "mm", "bmm", "addmm", "baddbmm"),
}
_FP32 = {
    F: ("softmax", "log_softmax", "layer_norm", "group_norm", "cross_entropy", "nll_loss", "mse_loss",
        "binary_cross_entropy_with_logits", "kl_div", "softplus", "normalize", "cosine_similarity"),
    torch: ("softmax", "log_softmax", "layer_norm", "group_norm", "exp", "log", "rsqrt", "pow", "cumsum", "norm"),
    torch.Tensor: ("softmax", "log_softmax", "exp", "log", "rsqrt", "pow", "cumsum", "norm"),
}
_HALF = (torch.float16, torch.bfloat16)


class _GroupedMM(torch.autograd.Function):
    """``grouped_mm`` on meta outside bf16, as CUDA's fallback kernel computes it."""

    @staticmethod
    def forward(ctx: Any, original: Callable, mat_a: Any, mat_b: Any, offs: Any, out_dtype: Any) -> Any:
        with _disable_current_modes():  # the shape only: the bf16 meta kernel's rules, allocating nothing tracked
            shape = original(mat_a.detach().to(torch.bfloat16), mat_b.detach().to(torch.bfloat16), offs=offs).shape
        ctx.save_for_backward(mat_a, mat_b)
        return mat_a.new_empty(shape, dtype=out_dtype or mat_a.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        mat_a, mat_b = ctx.saved_tensors
        return (None, grad.new_empty(mat_a.shape, dtype=mat_a.dtype) if ctx.needs_input_grad[1] else None,
                grad.new_empty(mat_b.shape, dtype=mat_b.dtype) if ctx.needs_input_grad[2] else None, None, None)


class Emulation:
    """The switches, and the autocast region's state (``autocast_dtype`` None: no autocast)."""

    def __init__(self, *, dropout: bool = True, attention: bool = True, grouped_mm: bool = True,
                 autocast_dtype: Any = None) -> None:
        self.dropout = dropout
        self.attention = attention
        self.grouped_mm = grouped_mm
        self.autocast_dtype = autocast_dtype
        self.autocast_on = False
        self.caching = False
        self._cache: dict[int, tuple[Any, Any]] = {}
        self.sdpa_kernels: dict[str, int] = {}

    # -- the autocast region ---------------------------------------------------------------------
    def forward_begins(self) -> None:
        """``with torch.autocast("cuda"):`` entered around the forward."""
        self.autocast_on = self.autocast_dtype is not None
        self.caching = self.autocast_on

    def forward_ends(self) -> None:
        """The region left: the weight-cast cache is cleared. Autocast stays on for backward, where
        checkpointing restores the forward's autocast state to recompute layers (without caching:
        each recomputed region is entered and left within backward)."""
        self.caching = False
        self._cache.clear()

    def step_ends(self) -> None:
        self.autocast_on = False
        self._cache.clear()

    def _low(self, value: Any) -> Any:
        if not (isinstance(value, torch.Tensor) and value.dtype == torch.float32):
            return value
        if self.caching and value.is_leaf and value.requires_grad:
            hit = self._cache.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
            cast = value.to(self.autocast_dtype)
            self._cache[id(value)] = (value, cast)
            return cast
        return value.to(self.autocast_dtype)

    @staticmethod
    def _fp32(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype in _HALF:
            return value.float()
        return value

    # -- patches ---------------------------------------------------------------------------------
    def _cast_wrapper(self, original: Callable, cast: Callable[[Any], Any]) -> Callable:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.autocast_on:
                args = tuple(cast(a) for a in args)
                kwargs = {k: cast(v) for k, v in kwargs.items()}
            return original(*args, **kwargs)

        return wrapper

    def _dropout(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
            if not training or p <= 0.0 or p >= 1.0 or input.device.type != "meta":
                return original(input, p, training, inplace)
            return torch.ops.aten.native_dropout(input, p, True)[0]

        return dropout

    @staticmethod
    def _grouped_mm(original: Callable) -> Callable:
        @functools.wraps(original)
        def grouped_mm(mat_a: Any, mat_b: Any, offs: Any = None, bias: Any = None, out_dtype: Any = None) -> Any:
            if mat_a.device.type != "meta" or bias is not None or mat_a.dtype == mat_b.dtype == torch.bfloat16:
                return original(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
            return _GroupedMM.apply(original, mat_a, mat_b, offs, out_dtype)

        return grouped_mm

    def _sdpa(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
            if self.autocast_on:
                query, key, value = self._low(query), self._low(key), self._low(value)
            if query.device.type != "meta" or query.dim() != 4:
                self._count("math")
                return original(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                **({"enable_gqa": enable_gqa} if enable_gqa else {}))
            groups = query.size(1) // key.size(1)
            if groups > 1:  # grouped-query attention: the kernels see every head's keys and values
                key = key.repeat_interleave(groups, dim=1)
                value = value.repeat_interleave(groups, dim=1)
            if query.dtype in _HALF and attn_mask is None and query.size(-1) <= 256:
                self._count("flash")
                return torch.ops.aten._scaled_dot_product_flash_attention(
                    query, key, value, dropout_p, is_causal, False, scale=scale)[0]
            bias = attn_mask
            if bias is not None:
                if bias.dtype == torch.bool:  # CUDA turns a boolean mask into an additive one first
                    bias = torch.zeros(bias.shape, dtype=query.dtype, device=bias.device).masked_fill(
                        bias.logical_not(), float("-inf"))
                bias = bias.to(query.dtype).expand(query.size(0), query.size(1), query.size(2), key.size(2))
            self._count("efficient")
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, True, dropout_p, is_causal, scale=scale)[0]

        return sdpa

    def _count(self, kernel: str) -> None:
        self.sdpa_kernels[kernel] = self.sdpa_kernels.get(kernel, 0) + 1

    @contextmanager
    def installed(self) -> Iterator[Emulation]:
        saved: list[tuple[Any, str, Any]] = []

        def patch(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
            original = getattr(owner, name, None)
            if original is None:
                return
            saved.append((owner, name, original))
            setattr(owner, name, make(original))

        if self.dropout:
            patch(F, "dropout", self._dropout)
        if self.grouped_mm:
            patch(F, "grouped_mm", self._grouped_mm)
            patch(torch, "_grouped_mm", self._grouped_mm)
        if self.attention:
            patch(F, "scaled_dot_product_attention", self._sdpa)
        elif self.autocast_dtype is not None:
            patch(F, "scaled_dot_product_attention", lambda orig: self._cast_wrapper(orig, self._low))
        if self.autocast_dtype is not None:
            for owner, names in _LOW_PRECISION.items():
                for name in names:
                    patch(owner, name, lambda orig: self._cast_wrapper(orig, self._low))
            for owner, names in _FP32.items():
                for name in names:
                    patch(owner, name, lambda orig: self._cast_wrapper(orig, self._fp32))
        try:
            yield self
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)
