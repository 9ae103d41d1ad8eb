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
  too.
Until the trace is recorded (the first step) nothing is kept or prefetched: the steady state's
window is the larger, and it is the one counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpudoc.errors import ProfileError
from gpudoc.estimate import terms

# DeepSpeedZeroConfig's defaults (``deepspeed/runtime/zero/config.py``), in elements.
DEFAULTS = {
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e5,
    "reduce_bucket_size": terms.REDUCE_BUCKET_SIZE,
    "sub_group_size": 1e9,
}
# What the HF Trainer and accelerate write for "auto" from the model's hidden size h
# (``HfTrainerDeepSpeedConfig.trainer_config_finalize``, accelerate's ``_prepare_deepspeed``).
_AUTO = {"reduce_bucket_size": lambda h: h * h, "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
         "stage3_param_persistence_threshold": lambda h: 10 * h}


@dataclass(frozen=True)
class Zero3Settings:
    max_live: float
    reuse_distance: float
    prefetch_bucket: float
    persistence_threshold: float
    reduce_bucket: float
    sub_group: float


def runs(setup: Any) -> bool:
    """DeepSpeed ZeRO-3 runs the job: ``zero_stage = 3`` without ``fsdp``, sharded or offloaded on one GPU.
    Its ``zero.Init`` (which the HF Trainer and accelerate enter for stage 3) replaces
    ``torch.nn.functional.linear`` by ``LinearFunctionForZeroStage3`` (``linear.py``), which saves
    every linear layer's input for backward, a frozen one's too (torch's own saves it only where the
    weight trains): so that the weight it saves is the parameter, released after the module, not a view."""
    return setup.zero_stage >= 3 and not setup.fsdp and (setup.sharding_stage >= 3 or setup.offload_params
                                                         or setup.offload_optimizer)


def job_settings(config_data: Sequence[tuple[str, Any]]) -> tuple[tuple[str, float | str], ...]:
    """The keys above that the job's DeepSpeed JSON (the first config read with a
    ``zero_optimization`` table) sets, as written: a number or ``"auto"``."""
    for label, data in config_data:
        zero = data.get("zero_optimization") if isinstance(data, Mapping) else None
        if not isinstance(zero, Mapping):
            continue
        found: list[tuple[str, float | str]] = []
        for key in DEFAULTS:
            value = zero.get(key)
            if value is None:
                continue
            if value == "auto" and key in _AUTO:
                found.append((key, "auto"))
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                found.append((key, float(value)))
            else:
                raise ProfileError(f"{label}: zero_optimization.{key} = {value!r} is not a count of elements "
                                   "(DeepSpeed refuses it too)", key=f"zero_optimization.{key}")
        return tuple(found)
    return ()


def settings(given: Sequence[tuple[str, float | str]], hidden: int) -> Zero3Settings:
    """DeepSpeed's defaults, overridden by what the job's JSON sets (``"auto"`` as the HF Trainer fills it)."""
    values = dict(DEFAULTS)
    for key, value in given:
        values[key] = float(_AUTO[key](hidden)) if value == "auto" else float(value)
    return Zero3Settings(values["stage3_max_live_parameters"], values["stage3_max_reuse_distance"],
                         values["stage3_prefetch_bucket_size"], values["stage3_param_persistence_threshold"],
                         values["reduce_bucket_size"], values["sub_group_size"])


def gathered_params(s: Zero3Settings, *, model: float, block: float, blocks: int, head: float, largest: float,
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


def describe(given: Sequence[tuple[str, float | str]]) -> str:
    """Where the settings came from, for the estimate's note."""
    said = ", ".join(f"{k} {v if v == 'auto' else f'{v:.3g}'}" for k, v in given)
    return f"the job's DeepSpeed JSON ({said}; DeepSpeed's defaults for the rest)" if said else "DeepSpeed's defaults"


def setup_with_job_settings(setup: Any, profile: Any) -> Any:
    """``setup`` with the stage-3 keys of the DeepSpeed JSON the profile's job reads, where it reads one."""
    job = getattr(profile, "job", None)
    given = job_settings(job.config_data) if job is not None else ()
    return replace(setup, zero3=given) if given else setup


def with_job_settings(inputs: Any, profile: Any) -> Any:
    return replace(inputs, setup=setup_with_job_settings(inputs.setup, profile))
