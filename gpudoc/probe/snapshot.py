"""What filled memory at an OOM, for the probe: the breakdown by kind from the live tensors, and
PyTorch's memory history (``agent.py`` loads this file by path beside itself, in the
job's interpreter; gpudoc never imports it, and never unpickles what it writes).

With ``[run] snapshot = "on-oom"`` the probe arms ``torch.cuda.memory._record_memory_history`` (Python
stacks, a bounded number of entries) once the job uses CUDA, and at an OOM dumps the snapshot,
gzip-compressed, into the run's probe directory for PyTorch's memory_viz. Recording costs time on
every allocation (measured on an H100: a GPT-2-small loop's median step 0.0434 s recorded against
0.0333 s bare, about +30%), so it stops once the job has passed the step where the last attempt
failed, plus a few: a relaunch that fits does not pay for it for hours. The largest live allocations by source
line are computed here, inside the job, from the snapshot's own dict (its documented format:
``segments`` -> ``blocks`` with ``size``, ``state`` and ``frames``), and written as plain JSON.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_ENTRIES = 100_000  # allocation events kept: PyTorch's own examples use this order
STEPS_PAST = 5  # steps recorded beyond the one where the last attempt ran out of memory
TOP = 10
# Frames inside these are the machinery, not the line that asked for the memory.
_MACHINERY = ("/torch/", "/site-packages/", "/dist-packages/", "<frozen", "/probe/agent.py")


def breakdown(torch: Any, model: Any, optimizers: list) -> dict:
    """What filled memory at an OOM, by kind, from the live tensors (any device): parameters,
    gradients, optimizer states; on CUDA, the rest of what was allocated (activations and
    temporaries) and what was reserved but not allocated. Each storage counted once."""
    params = list(model.parameters()) if model is not None else []
    seen: set[int] = set()

    def size(tensors: Any) -> int:
        total = 0
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                key = t.untyped_storage().data_ptr() if t.device.type != "cpu" else id(t)
                if key not in seen:
                    seen.add(key)
                    total += t.untyped_storage().nbytes()
        return total

    out = {"parameters": size(params), "gradients": size(p.grad for p in params if p.grad is not None),
           "optimizer_states": size(v for opt in optimizers for s in opt.state.values() for v in s.values())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        out["other"] = max(0, allocated - sum(out.values()))
        out["reserved_unallocated"] = max(0, reserved - allocated)
        out["allocated"] = allocated
    return out


def top_allocations(snapshot: dict, top: int = TOP) -> list[dict]:
    """The live blocks grouped by the first frame outside the machinery: [{"where", "module", "bytes"}],
    largest first. A block without frames (recorded before the history was armed) counts under
    "unknown"."""
    totals: dict[tuple[str, str | None], int] = {}
    for segment in snapshot.get("segments") or ():
        for block in segment.get("blocks") or ():
            if block.get("state") != "active_allocated":
                continue
            key = _where(block.get("frames") or ())
            totals[key] = totals.get(key, 0) + int(block.get("size") or 0)
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return [{"where": where, "module": module, "bytes": size} for (where, module), size in ranked]


def _where(frames: Any) -> tuple[str, str | None]:
    for frame in frames:  # innermost first, as PyTorch records them
        filename = str(frame.get("filename") or "")
        if filename and not any(part in filename for part in _MACHINERY):
            module = os.path.splitext(os.path.basename(filename))[0]
            return f"{os.path.basename(filename)}:{frame.get('line')} {frame.get('name')}", module
    return "unknown", None


class History:
    """The memory history of one rank, armed when asked for and stopped ``STEPS_PAST`` steps after
    ``until`` (the step the last attempt failed at)."""

    def __init__(self, torch: Any, until: int | None) -> None:
        self.torch = torch
        self.until = until
        self.recording = False

    def arm(self) -> None:
        if self.torch.cuda.is_available():
            self.torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
            self.recording = True

    def after_step(self, steps: int) -> None:
        if self.recording and self.until is not None and steps > self.until + STEPS_PAST:
            self.torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False

    def dump(self, directory: str, rank: int) -> tuple[str | None, list[dict]]:
        """At the OOM: the snapshot file (gzip) and the largest live allocations."""
        if not self.recording:
            return None, []
        import gzip
        import pickle

        snapshot = self.torch.cuda.memory._snapshot()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, f"snapshot-rank-{rank}.pickle.gz")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(path, flags, 0o600), "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as out:
            pickle.dump(snapshot, out)
        return path, top_allocations(snapshot)
