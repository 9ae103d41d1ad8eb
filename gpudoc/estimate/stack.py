"""The PyTorch release the job trains on, and those of its defaults that move memory.

gpudoc predicts for the newest behaviour unless ``[estimate] torch = "1.10"`` names an older
release (an estimate made on one machine for a job that runs on another stack). Three defaults
changed under the jobs gpudoc estimates, and each moves the peak:
- ``zero_grad``: before PyTorch 2.0 both ``Optimizer.zero_grad`` and ``Module.zero_grad`` (what the
  HF Trainer of that time called) zeroed the gradients in place (``set_to_none=False``); they stay
  allocated through the next forward and backward. 2.0 made ``set_to_none=True`` the default.
- the optimizers' implementation: 2.0 made ``foreach`` the CUDA default (``_default_to_fused_or_foreach``),
  whose step materialises whole-list temporaries; before it, the for-loop stepped one parameter at a time.
- CUDA kernels: PyTorch 1.13 sets ``CUDA_MODULE_LOADING=LAZY`` when the user has not (pytorch#86509);
  before it, every kernel of the build loads when the context is created.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudoc.errors import ProfileError

_RELEASE = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:[.+\-a-z0-9]*)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Stack:
    """``torch``: (major, minor) of the job's PyTorch; None when not stated (the newest behaviour)."""

    torch: tuple[int, int] | None = None

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

    def describe(self) -> str | None:
        """One line saying what an older release changes in the estimate; None for the newest."""
        if self.torch is None:
            return None
        said = []
        if not self.zero_grad_frees:
            said.append("zero_grad keeps the gradients through the next forward (set_to_none=False before 2.0)")
        if self.optimizer_impl == "forloop":
            said.append("the optimizer steps one parameter at a time (foreach became the default in 2.0)")
        if not self.lazy_module_loading:
            said.append("CUDA loads every kernel with the context (lazy loading from 1.13)")
        release = f"{self.torch[0]}.{self.torch[1]}"
        return f"[estimate] torch = {release}: " + ("; ".join(said) if said else "the newest defaults apply")


def stack_of(profile: object, notes: list[str]) -> Stack:
    """The profile's ``[estimate] torch``, read as a release ("1.10", "2.1.0+cu121"); ``notes`` gets
    what an older release changes."""
    value = (getattr(profile, "estimate", None) or {}).get("torch")
    if value is None:
        return Stack()
    match = _RELEASE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ProfileError(f"[estimate] torch = {value!r}: expected a PyTorch release as a string, such as \"2.1\"",
                           key="estimate.torch")
    stack = Stack((int(match[1]), int(match[2])))
    notes.append(stack.describe() or "")
    return stack
