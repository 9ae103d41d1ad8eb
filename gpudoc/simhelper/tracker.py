"""Live bytes of a training step on the meta device, as CUDA's caching allocator would count them.

Every tensor an op returns is looked up by its storage (all views share one Python storage object);
a new storage adds its size, rounded up to the allocator's 512-byte blocks, and a ``weakref.finalize``
on it subtracts that when the last view dies. The counts mirror ``torch.cuda.memory_allocated()``;
the peak of a window mirrors ``max_memory_allocated()`` after ``reset_peak_memory_stats()``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# The CUDA caching allocator hands out blocks in multiples of 512 bytes (kMinBlockSize), and
# max_memory_allocated counts the rounded block.
BLOCK = 512

# What a storage is, for the breakdown at the peak.
WEIGHTS, GRADIENTS, OPTIMIZER, ACTIVATIONS, TEMPORARIES = "weights", "gradients", "optimizer", "activations", "temporaries"


def rounded(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK if nbytes else 0


@dataclass
class Window:
    """The peak of one stretch of the step (first step, steady state) and what was live at it."""

    start_bytes: int
    peak_bytes: int
    peak_stage: str
    live_at_peak: tuple[tuple[int, int, str], ...] = ()  # (serial, bytes, stage) of each live storage
    stage_peaks: dict[str, int] = field(default_factory=dict)  # forward | backward | optimizer -> bytes
    # What was live at each stage's own peak: a later step's peak can fall in another stage than this
    # window's (``step`` composes the steady state from the first step's forward and backward).
    live_at_stage_peak: dict[str, tuple[tuple[int, int, str], ...]] = field(default_factory=dict)


class LiveBytes(TorchDispatchMode):
    """Counts live storages through every op dispatched while it is active.

    ``stage`` (forward | backward | optimizer | setup) is stamped on each new storage; ``counting =
    False`` records storages at zero bytes (a fused optimizer's temporaries never exist on CUDA).
    Data-dependent scalars (``.item()``, ``if tensor.all():``) cannot be read on meta: they answer 0
    (False), the branch a batch without padding takes, and are counted in ``scalar_reads``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.stage = "setup"
        self.counting = True
        self.scalar_reads = 0
        self._serial = 0
        self._records: dict[int, tuple[int, int, str]] = {}  # id(storage) -> (serial, bytes, stage)
        self._window: Window | None = None
        self._at_peak = False
        self._pending: set[str] = set()  # stages whose peak was raised since the last snapshot

    # -- tracking ------------------------------------------------------------------------------
    def track(self, tensor: Any) -> int | None:
        """Count ``tensor``'s storage once; its serial (None for a non-tensor or a sizeless view)."""
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "meta":
            return None  # host tensors (an optimizer's step counter) are not on the GPU either
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
            return None
        key = id(storage)
        known = self._records.get(key)
        if known is not None:
            return known[0]
        size = rounded(storage.nbytes()) if self.counting else 0
        self._serial += 1
        self._records[key] = (self._serial, size, self.stage)
        weakref.finalize(storage, self._free, key)
        self._add(size)
        return self._serial

    def recount(self, tensor: Any) -> None:
        """Give a storage recorded at zero bytes its real size (a fused optimizer's new states)."""
        storage = tensor.untyped_storage()
        serial, size, stage = self._records[id(storage)]
        real = rounded(storage.nbytes())
        if real != size:
            self._records[id(storage)] = (serial, real, stage)
            self._add(real - size)

    def bytes_of(self, serials: set[int]) -> dict[int, int]:
        """The counted size of each live storage among ``serials``."""
        return {serial: size for serial, size, _stage in self._records.values() if serial in serials}

    def serial_of(self, tensor: Any) -> int | None:
        if not isinstance(tensor, torch.Tensor):
            return None
        record = self._records.get(id(tensor.untyped_storage()))
        return record[0] if record else None

    def _add(self, size: int) -> None:
        self.live += size
        window = self._window
        if window is not None and self.live > window.stage_peaks.get(self.stage, 0):
            window.stage_peaks[self.stage] = self.live
            self._pending.add(self.stage)
        if window is not None and self.live > window.peak_bytes:
            window.peak_bytes = self.live
            window.peak_stage = self.stage
            self._at_peak = True

    def _free(self, key: int) -> None:
        if self._pending or self._at_peak:
            self._snapshot()
        _serial, size, _stage = self._records.pop(key)
        self.live -= size

    def _snapshot(self) -> None:
        """What is live now, at the peak just reached (taken before the first free that follows it)."""
        if self._window is not None:
            live = tuple(self._records.values())  # a copy at C speed: taken often while memory grows
            for stage in self._pending:
                self._window.live_at_stage_peak[stage] = live
            if self._at_peak:
                self._window.live_at_peak = live
        self._at_peak = False
        self._pending.clear()

    # -- windows -------------------------------------------------------------------------------
    def begin(self) -> None:
        """Start a window: its peak starts at what is live now (reset_peak_memory_stats)."""
        self._window = Window(start_bytes=self.live, peak_bytes=self.live, peak_stage=self.stage)
        self._at_peak = True
        self._pending.clear()

    def end(self) -> Window:
        if self._pending or self._at_peak:
            self._snapshot()
        window, self._window = self._window, None
        if window is None:
            raise RuntimeError("LiveBytes.end() without begin()")
        return window

    # -- dispatch ------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            self.scalar_reads += 1
            dtype = args[0].dtype
            return False if dtype is torch.bool else (0.0 if dtype.is_floating_point else 0)
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            self.track(leaf)
        return out


def classify(window: Window, *, weights: set[int], gradients: set[int], states: set[int]) -> dict[str, int]:
    """Bytes by kind of what was live at the window's peak."""
    kinds = dict.fromkeys((WEIGHTS, GRADIENTS, OPTIMIZER, ACTIVATIONS, TEMPORARIES), 0)
    for serial, size, stage in window.live_at_peak:
        if serial in weights:
            kind = WEIGHTS
        elif serial in gradients:
            kind = GRADIENTS
        elif serial in states:
            kind = OPTIMIZER
        elif stage == "optimizer":
            kind = TEMPORARIES
        else:
            kind = ACTIVATIONS
        kinds[kind] += size
    return kinds
