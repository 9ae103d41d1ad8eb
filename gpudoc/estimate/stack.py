"""The releases the job trains on, PyTorch's and torchao's, and those of their defaults that move memory.

gpudoc predicts for the newest behaviour unless ``[estimate] torch = "1.10"`` (or ``torchao = "0.1"``)
names an older release (an estimate made on one machine for a job that runs on another stack). Three
of PyTorch's defaults changed under the jobs gpudoc estimates, and each moves the peak:
- ``zero_grad``: before PyTorch 2.0 both ``Optimizer.zero_grad`` and ``Module.zero_grad`` (what the
  HF Trainer of that time called) zeroed the gradients in place (``set_to_none=False``); they stay
  allocated through the next forward and backward. 2.0 made ``set_to_none=True`` the default.
- the optimizers' implementation: 2.0 made ``foreach`` the CUDA default (``_default_to_fused_or_foreach``),
  whose step materialises whole-list temporaries; before it, the for-loop stepped one parameter at a time.
- CUDA kernels: PyTorch 1.13 sets ``CUDA_MODULE_LOADING=LAZY`` when the user has not (pytorch#86509);
  before it, every kernel of the build loads when the context is created.

torchao, which quantizes torchtune's QLoRA weights to NF4 as the model loads, did so for the whole
weight at once up to 0.1 (torchtune 0.1 pins ``torchao==0.1``), in chunks from 0.2 (pytorch/ao#196):
the load's temporaries (``terms.nf4_load_bytes``) differ by an order of magnitude.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudoc.errors import ProfileError
from gpudoc.estimate import terms

_RELEASE = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:[.+\-a-z0-9]*)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Stack:
    """(major, minor) of the job's PyTorch and torchao; None when not stated (the newest behaviour)."""

    torch: tuple[int, int] | None = None
    torchao: tuple[int, int] | None = None

    @property
    def zero_grad_frees(self) -> bool:
        """Whether ``zero_grad()`` frees the gradients (``set_to_none=True``, the default since 2.0)."""
        return self.torch is None or self.torch >= (2, 0)

    @property
    def optimizer_impl(self) -> str:
        """How torch's optimizers step by default on CUDA: "foreach" since 2.0, else "forloop"."""
        return "foreach" if self.torch is None or self.torch >= (2, 0) else "forloop"

    @property
    def lazy_module_loading(self) -> bool:
        """Whether CUDA loads kernels on first use (PyTorch sets it since 1.13)."""
        return self.torch is None or self.torch >= (1, 13)

    def context_bytes(self) -> int:
        """The CUDA context with its kernels, as this release loads them."""
        return terms.cuda_context_bytes(lazy=self.lazy_module_loading)

    @property
    def nf4_library(self) -> str:
        """How torchao quantizes a weight to NF4 (``terms.nf4_load_bytes``): in chunks from 0.2, else whole."""
        return "torchao" if self.torchao is None or self.torchao >= (0, 2) else "torchao-0.1"

    def describe(self) -> list[str]:
        """A line for each stated release, saying what it changes in the estimate; none for the newest."""
        lines = []
        if self.torch is not None:
            lines.append(self._describe_torch(self.torch))
        if self.torchao is not None:
            lines.append(f"[estimate] torchao = {self.torchao[0]}.{self.torchao[1]}: " + (
                "NF4 quantizes each frozen weight in chunks at load (as from 0.2)" if self.nf4_library == "torchao"
                else "NF4 quantizes each frozen weight whole at load, sixteen bf16 distances a weight (chunks from 0.2)"))
        return lines

    def _describe_torch(self, torch: tuple[int, int]) -> str:
        said = []
        if not self.zero_grad_frees:
            said.append("zero_grad keeps the gradients through the next forward (set_to_none=False before 2.0)")
        if self.optimizer_impl == "forloop":
            said.append("the optimizer steps one parameter at a time (foreach became the default in 2.0)")
        if not self.lazy_module_loading:
            said.append("CUDA loads every kernel with the context (lazy loading from 1.13)")
        return f"[estimate] torch = {torch[0]}.{torch[1]}: " + ("; ".join(said) if said else "the newest defaults apply")


def stack_of(profile: object, notes: list[str]) -> Stack:
    """The profile's ``[estimate] torch`` and ``torchao``, each read as a release ("1.10",
    "2.1.0+cu121"); ``notes`` gets what an older release changes."""
    stated = getattr(profile, "estimate", None) or {}
    stack = Stack(_release(stated, "torch", "PyTorch", "2.1"), _release(stated, "torchao", "torchao", "0.1"))
    notes += stack.describe()
    return stack


def _release(stated: dict, key: str, library: str, example: str) -> tuple[int, int] | None:
    value = stated.get(key)
    if value is None:
        return None
    match = _RELEASE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ProfileError(f"[estimate] {key} = {value!r}: expected a {library} release as a string, such as "
                           f"\"{example}\"", key=f"estimate.{key}")
    return int(match[1]), int(match[2])
