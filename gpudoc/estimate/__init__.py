"""Peak GPU memory of a training job, from the profile (see ``estimator``)."""

from gpudoc.estimate.estimator import (
    MAX_SEARCH_MICRO_BATCH,
    Estimate,
    estimate,
    estimate_inputs,
    estimate_with,
    max_micro_batch_size,
    per_sample_activation_bytes,
)

__all__ = ["MAX_SEARCH_MICRO_BATCH", "Estimate", "estimate", "estimate_inputs", "estimate_with", "max_micro_batch_size", "per_sample_activation_bytes"]
