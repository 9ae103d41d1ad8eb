"""What the probe reads of torch's own state, in the job's interpreter (``agent.py`` loads this file
by path beside itself once the job has imported torch; gpudoc never imports it): the autocast in
force, whether a process group runs, the first output autograd will reach, and whether an error is
an out-of-memory one. Each takes the job's ``torch`` module; none imports it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def autocast(torch: Any) -> str:
    """The autocast dtype in force ("off": none), CUDA's before the CPU's."""
    for device in ("cuda", "cpu"):
        if hasattr(torch, "get_autocast_dtype") and torch.is_autocast_enabled(device):
            return str(torch.get_autocast_dtype(device)).replace("torch.", "")
    return "off"


def distributed(torch: Any) -> bool:
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def first_grad_tensor(torch: Any, output: Any) -> Any:
    """The first tensor of a module's output that autograd will reach (its backward starts there)."""
    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (list, tuple)) else ()
    for value in values:
        found = first_grad_tensor(torch, value)
        if found is not None:
            return found
    return None


def is_oom(torch: Any, value: BaseException | None) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None)
    return (oom is not None and isinstance(value, oom)) or (
        isinstance(value, RuntimeError) and "out of memory" in str(value).lower())
