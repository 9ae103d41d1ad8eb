"""Megatron-LM's model state, as its own DDP and optimizer keep it: neither the HF Trainer's autocast
(fp32 parameters, gradients freed by ``zero_grad``) nor DeepSpeed's engine.

- Its DDP accumulates every gradient into one contiguous grad buffer, allocated when the model is
  wrapped and zeroed in place between iterations (``zero_grad_buffer``): the gradients are resident
  through forward and backward. The buffer is fp32 under ``--bf16`` (``arguments.py`` forces
  ``accumulate_allreduce_grads_in_fp32``) and in fp32 training, fp16 under ``--fp16``; it is what DDP
  all-reduces, so no bucket is allocated beside it.
- Under ``--bf16``/``--fp16`` the parameters are half and the optimizer
  (``Float16OptimizerWithFloat16Params``) keeps an fp32 main copy of each, and under ``--fp16`` an fp32
  main gradient as well; its optimizers are apex's (or Transformer Engine's) fused multi-tensor kernels,
  which step in place without temporaries.
- ``--use-distributed-optimizer`` (read as ``zero_stage = 1``) shards what the optimizer owns (the main
  copies and the states) over the data-parallel ranks, never the parameters or the grad buffer.

Megatron-LM's own table (``docs/source/distrib_optimizer.md``), bytes a parameter with Adam over ``d``
data-parallel ranks: fp16 parameters and gradients 20 (4 + 16/d distributed), bf16 parameters with fp32
gradients 18 (6 + 12/d), fp32 16 (8 + 8/d).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoc.estimate import terms
from gpudoc.estimate.inputs import TrainSetup

FRAMEWORK = "megatron"


def runs(setup: TrainSetup) -> bool:
    """The job is Megatron-LM's (read from its command, or named by ``[bind] args``)."""
    return setup.framework == FRAMEWORK


@dataclass(frozen=True)
class ModelState:
    """Bytes on one GPU: the parameters, the grad buffer, and what the optimizer owns (its share)."""

    weights: float
    gradients: float
    optimizer: float


def _half(setup: TrainSetup) -> bool:
    """--bf16 or --fp16: half-precision parameters, always with the optimizer's fp32 main copies."""
    return setup.precision != "fp32"


def _fp16_buffer(setup: TrainSetup) -> bool:
    """The grad buffer is fp16 under --fp16, else fp32."""
    return setup.precision.startswith("fp16")


def _distributed(setup: TrainSetup) -> bool:
    """--use-distributed-optimizer over more than one data-parallel rank."""
    return setup.sharding_stage >= 1 and setup.world_size > 1


def model_state(setup: TrainSetup, trainable: float, frozen: float) -> ModelState:
    main_copies = (4.0 if _half(setup) else 0.0) + (4.0 if _fp16_buffer(setup) else 0.0)
    owned = trainable * (main_copies + terms.optimizer_state_bytes(setup.optimizer, 4.0, momentum=setup.momentum))
    if _distributed(setup):
        owned = terms.zero_shard(owned, setup.world_size)
    return ModelState(weights=(trainable + frozen) * (2.0 if _half(setup) else 4.0),
                      gradients=trainable * (2.0 if _fp16_buffer(setup) else 4.0), optimizer=owned)


def note(setup: TrainSetup) -> str:
    sharded = f" sharded over {setup.world_size} ranks (distributed optimizer)" if _distributed(setup) else ""
    return (f"Megatron-LM: gradients in its DDP's contiguous grad buffer (allocated for good, "
            f"{'fp16' if _fp16_buffer(setup) else 'fp32'}), {'fp32 main copies and ' if _half(setup) else ''}"
            f"the fused {setup.optimizer}'s states{sharded}, no step temporaries")
