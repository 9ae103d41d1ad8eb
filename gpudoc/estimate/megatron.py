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


def model_state(setup: TrainSetup, trainable: float, frozen: float) -> ModelState:
    half = setup.precision != "fp32"  # --bf16 or --fp16: always with the optimizer's fp32 main copies
    param = 2.0 if half else 4.0
    grad_buffer = 2.0 if setup.precision.startswith("fp16") else 4.0
    main_copies = (4.0 if half else 0.0) + (4.0 if grad_buffer == 2.0 else 0.0)
    owned = trainable * (main_copies + terms.optimizer_state_bytes(setup.optimizer, 4.0, momentum=setup.momentum))
    if setup.sharding_stage >= 1 and setup.world_size > 1:  # the distributed optimizer
        owned = terms.zero_shard(owned, setup.world_size)
    return ModelState(weights=(trainable + frozen) * param, gradients=trainable * grad_buffer, optimizer=owned)


def note(setup: TrainSetup) -> str:
    distributed = setup.sharding_stage >= 1 and setup.world_size > 1
    return ("Megatron-LM: gradients in its DDP's contiguous grad buffer (allocated for good, "
            f"{'fp16' if setup.precision.startswith('fp16') else 'fp32'}), "
            + ("fp32 main copies and " if setup.precision != "fp32" else "")
            + f"the fused {setup.optimizer}'s states" + (f" sharded over {setup.world_size} ranks (distributed "
                                                         "optimizer)" if distributed else "") + ", no step temporaries")
