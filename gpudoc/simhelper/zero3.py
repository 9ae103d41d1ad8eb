"""DeepSpeed ZeRO-3, as one GPU holds it, on the meta device: the optimizer on the host or on the GPU.

What DeepSpeed does (``deepspeed/runtime/zero/partitioned_param_coordinator.py``,
``partition_parameters.py``, ``stage3.py``), and its stand-in here:
- every parameter larger than ``stage3_param_persistence_threshold`` is partitioned: the GPU keeps
  ``1/world`` of it, or nothing with ``offload_param`` (the partition is the host's); smaller ones
  stay whole (``ds_persist``);
- before a module runs, forward or backward, its parameters are gathered: the partition copied to
  the GPU (``ds_tensor.to(device)``) beside the full buffer it is gathered into, the copy dropped
  once gathered; after it, they are released, except where the recorded trace uses them again
  within ``stage3_max_reuse_distance`` elements (``__params_to_release``). Until a step has been
  recorded (the first), every module's parameters are released after it;
- the reduce bucket (``reduce_bucket_size`` elements of the gradient dtype) is allocated at start-up
  and held; each gradient is copied into it and leaves for the host, where the optimizer steps
  (``offload_optimizer``): no optimizer state, no fp32 master and no gradient stays on the GPU;
- with the optimizer on the GPU, the rank's share of what trains is there instead: its fp32 copy
  (``fp32_partitioned_groups_flat``), which the optimizer steps, and its states; the share of the
  gradients, allocated at start-up and held (``grad_partitions_flat_buffer``, the half dtype), each
  reduced gradient's part kept in it; in ``step``, sub-group by sub-group (``sub_group_size``
  elements), its gradients flattened and cast to fp32 (``_prepare_fp32_grad_for_sub_group``) before
  the optimizer steps it.
``zero.Init`` also puts DeepSpeed's own linear function in place of ``F.linear`` (``_Linear``): it
saves the weight parameter itself, so that a released weight's storage goes, and every input.
The prefetch (``stage3_prefetch_bucket_size``) is not replayed: it moves when a gather starts, not
what the trace keeps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .zero import HostOptimizer

# A module whose inputs need no gradient (the first one) still gets its backward pre-hook: as DeepSpeed's.
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")


class _Linear(torch.autograd.Function):
    """DeepSpeed's ``LinearFunctionForZeroStage3``, which ``zero.Init`` puts in place of
    ``F.linear``: it saves the input and the weight parameter itself (torch's linear saves a view of
    the weight, which would keep the gathered storage alive, and no input for a frozen weight)."""

    @staticmethod
    def forward(ctx: Any, input: Any, weight: Any, bias: Any = None) -> Any:
        ctx.save_for_backward(input, weight, bias)
        out = input.matmul(weight.t())
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        input, weight, bias = ctx.saved_tensors
        grad_input = grad.matmul(weight) if ctx.needs_input_grad[0] else None
        grad_weight = grad.reshape(-1, grad.shape[-1]).t().matmul(input.reshape(-1, input.shape[-1])) \
            if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(tuple(range(grad.dim() - 1))) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_input, grad_weight, grad_bias


_ACTIVE: list[Any] = []  # the rank whose parameters go through DeepSpeed's linear


def _install_linear() -> None:
    """Once per helper: F.linear sends the active rank's partitioned weights through ``_Linear``,
    every other call to torch's own (the next spec's model is not the rank's)."""
    original = F.linear
    if getattr(original, "zero3", False):
        return

    def linear(input: Any, weight: Any, bias: Any = None) -> Any:
        if _ACTIVE and weight in _ACTIVE[-1].shapes:
            return _Linear.apply(input, weight, bias)
        return original(input, weight, bias)

    linear.zero3 = True  # type: ignore[attr-defined]
    F.linear = linear


class Zero3Rank:
    """One rank of a ZeRO-3 job: the gather and release hooks, the bucket and, with the optimizer on the
    GPU, the rank's fp32 share, its states and its gradients' share."""

    def __init__(self, zero: dict, model: Any, params: list, tracker: Any,
                 make_optimizer: Callable[[list], Any]) -> None:
        settings = zero["settings"]  # the job's, DeepSpeed's defaults filled in (gpudoc's ``estimate.zero3``)
        self.world = max(1, int(zero.get("world") or 1))
        self.reuse = float(settings["stage3_max_reuse_distance"])
        self.tracker = tracker
        self.gathered: set[int] = set()  # the tracker's serials of gathered parameters: weights
        self.shapes: dict[Any, torch.Size] = {}
        self.partitions: list[Any] = []
        # The engine casts the module to its dtype (the base's: peft's fp32 adapters become half).
        engine_dtype = max(model.parameters(), key=lambda p: p.numel()).dtype
        for param in params:
            param.data = param.data.to(engine_dtype)
        self.share = -(-sum(p.numel() for p in params) // self.world)  # elements of what trains, per rank
        self.sub_group = max(1, min(self.share, int(settings.get("sub_group_size") or self.share)))
        threshold = float(settings["stage3_param_persistence_threshold"])
        owners: dict[Any, list[Any]] = {}
        for module in model.modules():
            for param in module.parameters(recurse=False):
                if param.numel() > threshold:
                    owners.setdefault(module, []).append(param)
        for module, owned in owners.items():
            for param in owned:
                if param in self.shapes:  # tied: one parameter, gathered by each module that uses it
                    continue
                self.shapes[param] = param.shape
                if not zero.get("offload_params"):
                    self.partitions.append(torch.empty(-(-param.numel() // self.world), dtype=param.dtype,
                                                       device="meta"))
                param.data = torch.empty(0, dtype=param.dtype, device="meta")
            module.register_forward_pre_hook(lambda m, _args: self._gather(m))
            module.register_forward_hook(lambda m, _args, _out: self._release(m))
            module.register_full_backward_pre_hook(lambda m, _grad: self._backward(m))
        self.owners = owners
        self.gathered |= {s for s in map(tracker.serial_of, self.partitions) if s}  # weights, as the gathered ones
        self.trace: list[tuple[Any, int]] = []  # (module, elements gathered) in the order of a step
        self.recorded = False
        self.position = 0
        self.in_backward: Any = None
        grad_dtype = params[0].dtype
        self.bucket = torch.empty(int(settings["reduce_bucket_size"]), dtype=grad_dtype, device="meta")
        for param in params:
            param.register_post_accumulate_grad_hook(self._gradient)
        self.optimizer: Any = HostOptimizer()
        self.impl = "host"
        self.masters: list[Any] = []
        self.grads: Any = None
        self.startup: Any = None
        if not zero.get("offload_optimizer", True):
            sizes = [min(self.sub_group, self.share - start) for start in range(0, self.share, self.sub_group)]
            self.masters = [torch.empty(n, dtype=torch.float32, device="meta").requires_grad_(True) for n in sizes]
            self.optimizer, self.impl = make_optimizer(self.masters)
            self.grads = torch.empty(self.share, dtype=grad_dtype, device="meta")  # grad_partitions_flat_buffer
            # initialize_optimizer_states: the fp32 gradients' buffer of the largest sub-group, until the
            # first step replaces it sub-group by sub-group (_prepare_fp32_grad_for_sub_group).
            self.startup = torch.empty(max(sizes), dtype=torch.float32, device="meta")
        _install_linear()
        _ACTIVE[:] = [self]

    def _gather(self, module: Any) -> None:
        elements = 0
        for param in self.owners[module]:
            if param.numel() == 0:
                copy = torch.empty(-(-self.shapes[param].numel() // self.world), dtype=param.dtype, device="meta")
                param.data = torch.empty(self.shapes[param], dtype=param.dtype, device="meta")
                del copy
                self.gathered.add(self.tracker.serial_of(param) or 0)
            elements += self.shapes[param].numel()
        if not self.recorded:
            self.trace.append((module, elements))
        self.position += 1

    def _backward(self, module: Any) -> None:
        """A module's backward begins: the one before it is done (its weight's gradient accumulated:
        a backward hook fires before that), so it is released now, and this one gathered."""
        if self.in_backward is not None:
            self._release(self.in_backward)
        self._gather(module)
        self.in_backward = module

    def _reused_soon(self, module: Any) -> bool:
        """Whether the recorded trace runs ``module`` again within the reuse distance."""
        if not self.recorded:
            return False
        traversed = 0
        for later, elements in self.trace[self.position:]:
            if traversed >= self.reuse:
                return False
            if later is module:
                return True
            traversed += elements
        return False

    def _release(self, module: Any) -> None:
        if self._reused_soon(module):
            return
        for param in self.owners[module]:
            param.data = torch.empty(0, dtype=param.dtype, device="meta")

    def _gradient(self, param: Any) -> None:
        param.grad = None  # copied into the bucket; the rank's part kept in its share or sent to the host

    def gradient_storages(self) -> list[Any]:
        return [t for t in (self.bucket, self.grads, self.startup) if t is not None]

    def backward_ends(self, boundary: bool) -> None:
        """The step's end: what is still gathered is released, and the trace is recorded."""
        for module in self.owners:
            for param in self.owners[module]:
                param.data = torch.empty(0, dtype=param.dtype, device="meta")
        self.recorded, self.position, self.in_backward = True, 0, None

    def step(self, run_optimizer: Callable[[], None], note_gradient: Callable[[Any], None]) -> None:
        """The host steps; on the GPU, sub-group by sub-group: its gradients flattened and cast to fp32
        beside the share, then the optimizer on that sub-group's fp32 partition."""
        for master in self.masters:
            flat = torch.empty(master.numel(), dtype=self.grads.dtype, device="meta")
            single = flat.float()
            note_gradient(single)
            del flat
            master.grad = single
            del single
            self.startup = None
            run_optimizer()
            master.grad = None
