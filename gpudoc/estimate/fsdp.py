"""torch FSDP between the micro batches of one optimizer step: what it keeps unsharded.

A loop that accumulates gradients under FSDP skips the reduce-scatter on every micro batch but the
last, and the gradients stay whole on each GPU until then:
- FSDP1's ``no_sync`` (what Lightning Fabric's ``no_backward_sync`` and accelerate's ``accumulate``
  enter) accumulates each flat parameter's unsharded gradient (``torch/distributed/fsdp``: the
  gradient of the views of the unsharded ``FlatParameter``). A flat parameter trains if any of its
  original parameters does (``_validate_tensors_to_flatten`` with ``use_orig_params``, which LoRA
  under FSDP1 needs), and its gradient spans all of it: under LoRA, the whole of every block that has
  an adapter (the root unit, embedding and head, is frozen and has none).
- a pipeline stage under FSDP2 (``torch.distributed.pipelining``'s ``backward_maybe_with_nosync``)
  sets ``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)``: the stage's
  parameters stay gathered and their gradients whole, in the parameters' dtype
  (``to_accumulated_grad_if_needed`` upcasts only when resharding), until the last micro batch.
The step itself sees the sharded gradients again.

A loop that never enters either reduce-scatters every micro batch, and each GPU accumulates only its
share: torchtune's distributed recipes (``recipes/full_finetune_distributed.py``,
``recipes/lora_finetune_distributed.py``: FSDP1 in 0.1-0.2, FSDP2's ``fully_shard`` from 0.3 to 0.6)
call ``loss.backward()`` on each micro batch and neither ``no_sync`` nor
``set_requires_gradient_sync(False)`` appears in them or in ``torchtune/training``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoc.estimate.inputs import TrainSetup
from gpudoc.units import format_bytes

if TYPE_CHECKING:
    from gpudoc.estimate.model import Phases

# Frameworks (as ``defaults.job_framework`` names them) whose loops reduce-scatter every micro batch.
REDUCES_EVERY_MICRO_BATCH = frozenset({"torchtune"})


def accumulated(setup: TrainSetup, *, pipelined: bool, params: float, trainable: float, block_params: float,
                compute_bytes: float, notes: list[str]) -> tuple[float, float] | None:
    """(gradients, gathered weights) one GPU holds through the micro batches before the last, in the
    compute dtype, or None where FSDP reduces every micro batch (one micro batch per step, or no FSDP).
    ``params``: the parameters this GPU's share of the model has before sharding."""
    if not setup.fsdp or setup.sharding_stage < 2 or setup.gradient_accumulation_steps <= 1:
        return None
    if not pipelined and setup.framework in REDUCES_EVERY_MICRO_BATCH:
        notes.append(f"FSDP under {setup.framework}'s recipe: the gradients are reduce-scattered every micro batch "
                     "(no no_sync), each GPU accumulating its share")
        return None
    whole = block_params if setup.lora_rank else trainable
    if pipelined:
        notes.append(f"FSDP in a pipeline stage over {setup.gradient_accumulation_steps} micro batches: the "
                     "stage's parameters stay gathered and their gradients whole until the last "
                     "(torch.distributed.pipelining)")
        return whole * compute_bytes, params * compute_bytes
    notes.append(f"FSDP with gradient_accumulation_steps = {setup.gradient_accumulation_steps}: the gradients stay "
                 "unsharded until the last micro batch (no_sync: Lightning Fabric's no_backward_sync, accelerate's "
                 f"accumulate){', of every block with an adapter, its frozen weights too (flat parameters)' if setup.lora_rank else ''}")
    return whole * compute_bytes, 0.0


def reserved_beside(setup: TrainSetup, phases: Phases) -> float:
    """Bytes the caching allocator reserves beside forward/backward's peak under FSDP: the sharded
    gradients, which FSDP allocates on its reduce-scatter stream (FSDP1's ``_post_backward_hook``
    reduces under ``post_backward_stream``, where ``_get_reduce_scatter_tensors`` allocates the shard;
    FSDP2's ``foreach_reduce`` under ``reduce_scatter_stream``, the shards views of its
    ``reduce_output``). PyTorch's caching allocator hands a freed block only to a request on the stream
    it was allocated on (``CUDACachingAllocator.cpp``, ``get_free_block``), so the activations backward
    frees on the compute stream cannot hold them: the pool keeps both, the activations' blocks cached,
    until a request fails and the cache is released. Zero where the gradients are already counted at
    the peak (accumulated between micro batches), where the step is the peak, without FSDP, or with its
    CPU offload (``offload_params``: each unit's shard goes to the host as soon as it is reduced)."""
    if not setup.fsdp or setup.sharding_stage < 2 or setup.offload_params or phases.peak_phase != "forward_backward":
        return 0.0
    if phases.forward_backward.get("gradients", 0.0):
        return 0.0
    return phases.optimizer_step.get("gradients", 0.0)


def reserved_note(beside: float) -> str:
    return (f"FSDP: its sharded gradients ({format_bytes(beside)}) are reduce-scattered on a stream of their own, "
            "whose blocks the allocator keeps apart from the activations': counted in the allocator's reserve")
