"""DeepSpeed ZeRO-3 on one GPU: the settings that decide what it holds gathered, read from the job's
DeepSpeed JSON with DeepSpeed's defaults, and the parameters gathered at its peak.

What the engine does (``deepspeed/runtime/zero/partitioned_param_coordinator.py``,
``parameter_offload.py``, ``partition_parameters.py``, ``stage3.py``):
- before each submodule runs, forward or backward, its parameters are gathered (``fetch_sub_module``)
  and those next in the recorded trace prefetched while fewer than ``stage3_prefetch_bucket_size``
  elements are in flight and fewer than ``stage3_max_live_parameters`` are available;
- after it, they are released (``release_sub_module``) unless the trace uses them again within
  ``stage3_max_reuse_distance`` elements (``__params_to_release``). At the turn from forward to
  backward that keeps the head, used again at once, and the last blocks, whose backward comes after
  the blocks behind them have run twice (three times with activation checkpointing, which runs each
  block's forward again in its backward), and after the head's forward and backward;
- parameters of at most ``stage3_param_persistence_threshold`` elements stay gathered for good
  (``ds_persist``: the norms and biases);
- a parameter is gathered by copying the rank's partition to the GPU (``ds_tensor.to(device)``: from
  the host with ``offload_param``) beside the full buffer it is gathered into: ``1/world`` of the
  largest module fetched at once, transient — on one GPU, a second copy of it;
- the reduce bucket (``reduce_bucket_size`` elements of the gradient dtype) is allocated at start-up
  and held; without ``offload_optimizer`` the fp32 gradient of the largest optimizer sub-group
  (``sub_group_size`` elements of the rank's partition at most, ``initialize_optimizer_states``) is
  too, until the first step: from then on each sub-group's fp32 gradient lives while it steps
  (``_release_sub_group``).
Until the trace is recorded (the first step) nothing is kept or prefetched: the steady state's
window is the larger, and it is the one counted. The settings are the job's (``zero_settings``).
"""

from __future__ import annotations

from gpudoc.estimate import terms, zero_settings
from gpudoc.estimate.inputs import ModelShape, TrainSetup, layer_matrix_shapes, layer_params, n_blocks
from gpudoc.estimate.zero_settings import ZeroSettings


def runs(setup: TrainSetup) -> bool:
    """DeepSpeed ZeRO-3 runs the job: ``zero_stage = 3`` without ``fsdp``, sharded or offloaded on one GPU.
    Its ``zero.Init`` (which the HF Trainer and accelerate enter for stage 3) replaces
    ``torch.nn.functional.linear`` by ``LinearFunctionForZeroStage3`` (``linear.py``), which saves
    every linear layer's input for backward, a frozen one's too (torch's own saves it only where the
    weight trains): so that the weight it saves is the parameter, released after the module, not a view."""
    return setup.zero_stage >= 3 and not setup.fsdp and (setup.sharding_stage >= 3 or setup.offload_params
                                                         or setup.offload_optimizer)


def gathered_params(s: ZeroSettings, *, model: float, block: float, blocks: int, head: float, largest: float,
                    small: float, recompute: bool, world: int) -> float:
    """Parameters ZeRO-3 holds gathered on a GPU at the turn from forward to backward, where the
    activations peak too: the head and the last blocks kept for their reuse, what is prefetched
    within the budgets, the persistent small parameters (``small``: those below the threshold) and
    the partition copy of the largest module being gathered."""
    kept = 0.0
    if s.reuse_distance > 0:
        kept = head
        passes = 3 if recompute else 2
        for k in range(blocks):
            if passes * k * block + 2 * head >= s.reuse_distance:
                break
            kept += block
    prefetch = min(s.prefetch_bucket, max(0.0, s.max_live - kept))
    persistent = small if s.persistence_threshold > 0 else 0.0
    return min(model, kept + prefetch + persistent) + largest / max(1, world)


def gathered_params_for(shape: ModelShape, setup: TrainSetup, total: float, unit: float, notes: list[str]) -> float:
    """Parameters a ZeRO-3 / FSDP engine holds gathered at once: FSDP the unit it computes and the
    one it prefetches; DeepSpeed what its trace keeps for reuse and prefetches (``gathered_params``).
    ``zero_stage = 3`` does not say which engine: the larger."""
    fsdp = min(total, terms.gathered_working_set_bytes(unit, 1.0))
    if setup.fsdp:
        return fsdp
    plain, cross = n_blocks(shape)
    emb = float(shape.vocab * shape.hidden)
    live = gathered_params(
        zero_settings.settings(setup.zero_settings, shape.hidden), model=total, block=float(layer_params(shape, cross_attention=bool(cross))),
        blocks=plain + cross, head=emb, largest=float(max([i * o for i, o in layer_matrix_shapes(shape).values()] + [emb])),
        small=3.0 * (plain + cross + 1) * shape.hidden, recompute=setup.gradient_checkpointing != "none", world=setup.world_size)
    notes.append(f"ZeRO-3 holds {live:.3g} parameters gathered as backward starts (the head and last blocks kept for "
                 f"reuse, prefetch, persistent ones, the partition being gathered), from {zero_settings.describe(setup.zero_settings)}; "
                 "fsdp = true for FSDP's two units")
    return max(fsdp, live)
