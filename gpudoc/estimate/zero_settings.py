"""The job's DeepSpeed ZeRO settings that size what a GPU holds, for every stage: read from the
DeepSpeed JSON the job's command names, with DeepSpeed's defaults where it is silent.

What each one allocates (``deepspeed/runtime/zero/stage_1_and_2.py``, ``stage3.py``, ``config.py``):
- ``reduce_bucket_size``: elements of the gradient dtype each bucket holds. At stages 1/2 with
  ``contiguous_gradients`` (the default) ``setup_buckets`` allocates it whole at the first gradient of
  each backward, whatever the model's size; without it, ``buffered_reduce_fallback`` flattens at
  most that many elements of the gradients at a time. Stage 3 allocates it at start-up, for good.
- ``overlap_comm`` (off below stage 3, on at 3: ``overlap_comm_valid``): a second bucket, so that one
  is reduced while the other fills.
- ``contiguous_gradients`` (on): the bucket above, and at stage 2 the rank's share of the gradients
  copied into one flat buffer (``grads_in_partition``); forced on with ``offload_optimizer``.
- ``allgather_bucket_size`` and ``round_robin_gradients``: no buffer of their own (the step's
  all-gather writes into the flat half-precision model in place, ``all_gather_into_tensor``; round
  robin only reorders the gradients between ranks): read, checked, and moving nothing.
- ``sub_group_size`` and the ``stage3_*`` keys: ZeRO-3's (``zero3``).
The HF Trainer and accelerate fill ``"auto"`` from the model's hidden size h for
``reduce_bucket_size`` (h x h, any stage) and two stage-3 keys (``trainer_config_finalize``); DeepSpeed
refuses ``"auto"`` anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpudoc.errors import ProfileError
from gpudoc.estimate import terms
from gpudoc.estimate.inputs import Inputs, TrainSetup

Given = tuple[tuple[str, float | bool | str], ...]

# DeepSpeedZeroConfig's defaults (``deepspeed/runtime/zero/config.py``): counts in elements.
COUNTS = {
    "reduce_bucket_size": terms.REDUCE_BUCKET_SIZE,
    "allgather_bucket_size": 5e8,
    "sub_group_size": 1e9,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e5,
}
SWITCHES = ("overlap_comm", "contiguous_gradients", "round_robin_gradients")
# What the HF Trainer and accelerate write for "auto" from the model's hidden size h
# (``HfTrainerDeepSpeedConfig.trainer_config_finalize``, accelerate's ``_prepare_deepspeed``).
_AUTO = {"reduce_bucket_size": lambda h: h * h, "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
         "stage3_param_persistence_threshold": lambda h: 10 * h}


@dataclass(frozen=True)
class ZeroSettings:
    reduce_bucket: float
    overlap_comm: bool
    contiguous_gradients: bool
    sub_group: float
    max_live: float
    reuse_distance: float
    prefetch_bucket: float
    persistence_threshold: float

    @property
    def buckets(self) -> int:
        """Reduce buckets held at once: two with ``overlap_comm``."""
        return 2 if self.overlap_comm else 1


def job_settings(config_data: Sequence[tuple[str, Any]]) -> Given:
    """The keys above that the job's DeepSpeed JSON (the first config read with a
    ``zero_optimization`` table) sets, as written: a count, a switch, or ``"auto"``."""
    for label, data in config_data:
        zero = data.get("zero_optimization") if isinstance(data, Mapping) else None
        if not isinstance(zero, Mapping):
            continue
        found: list[tuple[str, float | bool | str]] = []
        for key in (*COUNTS, *SWITCHES):
            value = zero.get(key)
            if value is None:
                continue
            if key in SWITCHES:
                if not isinstance(value, bool):
                    raise ProfileError(f"{label}: zero_optimization.{key} = {value!r} is not true or false "
                                       "(DeepSpeed refuses it too)", key=f"zero_optimization.{key}")
                found.append((key, value))
            elif value == "auto" and key in _AUTO:
                found.append((key, "auto"))
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                found.append((key, float(value)))
            else:
                raise ProfileError(f"{label}: zero_optimization.{key} = {value!r} is not a count of elements "
                                   "(DeepSpeed refuses it too)", key=f"zero_optimization.{key}")
        return tuple(found)
    return ()


def settings(given: Given, hidden: int, stage: int = 3) -> ZeroSettings:
    """DeepSpeed's defaults at ``stage``, overridden by what the job's JSON sets (``"auto"`` as the HF
    Trainer fills it)."""
    values: dict[str, float | bool] = {**COUNTS, "overlap_comm": stage >= 3, "contiguous_gradients": True}
    for key, value in given:
        values[key] = value if isinstance(value, bool) else float(_AUTO[key](hidden)) if value == "auto" else float(value)
    return ZeroSettings(float(values["reduce_bucket_size"]), bool(values["overlap_comm"]),
                        bool(values["contiguous_gradients"]), float(values["sub_group_size"]),
                        float(values["stage3_max_live_parameters"]), float(values["stage3_max_reuse_distance"]),
                        float(values["stage3_prefetch_bucket_size"]), float(values["stage3_param_persistence_threshold"]))


def describe(given: Given) -> str:
    """Where the settings came from, for the estimate's notes."""
    def shown(value: float | bool | str) -> str:
        return str(value).lower() if isinstance(value, bool) else value if isinstance(value, str) else f"{value:.3g}"

    said = ", ".join(f"{k} {shown(v)}" for k, v in given)
    return f"the job's DeepSpeed JSON ({said}; DeepSpeed's defaults for the rest)" if said else "DeepSpeed's defaults"


def setup_with_job_settings(setup: TrainSetup, profile: object) -> TrainSetup:
    """``setup`` with the ZeRO keys of the DeepSpeed JSON the profile's job reads, where it reads one."""
    job = getattr(profile, "job", None)
    given = job_settings(job.config_data) if job is not None else ()
    return replace(setup, zero_settings=given) if given else setup


def with_job_settings(inputs: Inputs, profile: object) -> Inputs:
    return replace(inputs, setup=setup_with_job_settings(inputs.setup, profile))
