"""DeepSpeed ZeRO stages 1 and 2 as one data-parallel rank holds them, on the meta device.

What DeepSpeed's ``DeepSpeedZeroOptimizer`` (``deepspeed/runtime/zero/stage_1_and_2.py``) allocates
on each GPU, in the order it does:
- the model in the half dtype (the engine casts the module; no autocast) and, per rank, an fp32
  copy of its ``1/world`` share of the flattened parameters (``single_partition_of_fp32_groups``),
  which the optimizer steps: its states are that share's too;
- in backward, from the first gradient on (``setup_buckets``): the reduce bucket,
  ``reduce_bucket_size`` elements of the half dtype (two with ``overlap_comm``), whatever the model's
  size (without ``contiguous_gradients``, the flattened copy ``buffered_reduce_fallback`` makes of at
  most that many elements: no more than the model has); at stage 2 each gradient is copied into it (``reduce_independent_p_g_buckets_and_remove_grads``)
  and the rank's share kept in ``grads_in_partition`` (``1/world`` of the gradients), the parameter's
  own gradient dropped; at stage 1 the gradients stay whole until the accumulation boundary, where
  they are reduced through the bucket into the same share. The buckets go at the end of each
  backward (``_release_ipg_buffers``);
- in ``step``: the share flattened (``flatten(averaged_gradients)``, a half copy) and cast to fp32
  (``single_grad_partition``), the half share released, the optimizer step on the fp32 share; the
  updated share is copied back and all-gathered into the flat half buffer in place
  (``all_gather_dp_groups``: nothing the size of the model is allocated);
- with ``offload_optimizer`` the fp32 share, its states and the gradients' share are the host's: each
  reduced gradient leaves through ``temp_grad_buffer_for_gpu_offload``, the size of the largest
  parameter, allocated at start-up and held (the buckets as above: ``contiguous_gradients`` is forced
  on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# DeepSpeed's defaults (``DeepSpeedZeroConfig``): elements of the reduce bucket; overlap_comm is off
# below stage 3.
REDUCE_BUCKET_SIZE = 500_000_000


class HostOptimizer:
    """The optimizer DeepSpeed steps on the host: nothing of it is on the GPU."""

    state: dict = {}  # noqa: RUF012 - nothing is ever stored

    def step(self) -> None:
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None


class ZeroRank:
    """One rank's share of a ZeRO-1/2 job: its fp32 master share, which the optimizer steps, and the
    gradient hooks that reduce into the bucket and keep the share."""

    def __init__(self, zero: dict, params: list, make_optimizer: Callable[[list], Any]) -> None:
        self.stage, self.world = int(zero["stage"]), max(1, int(zero["world"]))
        self.bucket_size = int(zero.get("reduce_bucket_size") or REDUCE_BUCKET_SIZE)
        self.buffers = 2 if zero.get("overlap_comm") else 1
        self.offload = bool(zero.get("offload_optimizer"))
        if not zero.get("contiguous_gradients", True) and not self.offload:  # buffered_reduce_fallback
            self.bucket_size = min(self.bucket_size, sum(p.numel() for p in params))  # flattens what there is
        self.params = params
        self.dtype = params[0].dtype
        self.share = -(-sum(p.numel() for p in params) // self.world)
        self.optimizer: Any = HostOptimizer()
        self.impl, self.master, self.masters, self.staging = "host", None, [], None
        if self.offload:
            self.staging = torch.empty(max(p.numel() for p in params), dtype=self.dtype, device="meta")
        else:
            self.master = torch.empty(self.share, dtype=torch.float32, device="meta").requires_grad_(True)
            self.masters = [self.master]  # what the optimizer steps: one fp32 share
            self.optimizer, self.impl = make_optimizer([self.master])
        self.buckets: list[Any] = []
        self.grads: Any = None  # grads_in_partition
        for param in params:
            param.register_post_accumulate_grad_hook(self._gradient)

    def _gradient(self, param: Any) -> None:
        if not self.buckets:  # setup_buckets, at the first gradient of each backward
            self.buckets = [torch.empty(self.bucket_size, dtype=self.dtype, device="meta")
                            for _ in range(self.buffers)]
        if self.stage >= 2:
            if not self.offload:
                self._keep_share()
            param.grad = None  # copied into the bucket, reduced, the rank's part kept in the share

    def _keep_share(self) -> None:
        if self.grads is None:
            self.grads = torch.empty(self.share, dtype=self.dtype, device="meta")

    def backward_ends(self, boundary: bool) -> None:
        """The engine's epilogue after each backward: stage 1 reduces at the accumulation boundary
        (into the share, through the bucket, the whole gradients still live); the buckets go."""
        if self.stage == 1 and boundary and not self.offload:
            self._keep_share()
        self.buckets = []

    def gradient_storages(self) -> list[Any]:
        """What holds gradients now: the buckets, the share, the fp32 share, the host's staging buffer."""
        master = self.master.grad if self.master is not None else None
        return [t for t in (*self.buckets, self.grads, master, self.staging) if t is not None]

    def step(self, run_optimizer: Callable[[], None], note_gradient: Callable[[Any], None]) -> None:
        """``DeepSpeedZeroOptimizer.step``: the whole gradients other ranks update go
        (``free_grad_in_param_list``: at stage 1 the rank's own are views of its share by now), the
        share is flattened and cast to fp32, the half share released, and the optimizer steps."""
        for param in self.params:
            param.grad = None
        if self.master is None:
            return  # the host steps
        flat = torch.empty(self.share, dtype=self.dtype, device="meta")
        single = flat.float()
        note_gradient(single)
        del flat
        self.master.grad = single
        del single
        self.grads = None
        run_optimizer()
        self.master.grad = None
