"""The load phase of a 4-bit model: each frozen weight is quantized on the GPU as the model is built
and loaded, beside the weights already there, and the quantization's own temporaries can set the
job's peak before any step runs (``terms.nf4_load_bytes`` follows each library's code).

Which library quantizes is the job's: the simulation reads it in the job's interpreter (torchao and
its release, or bitsandbytes). The formula reads it from the precision: 4-bit under autocast is
transformers' ``load_in_4bit`` (bitsandbytes); pure half precision is torchtune's QLoRA (torchao),
as its current releases quantize, in chunks. torchao 0.1 (torchtune 0.1's pin) quantized a whole
weight at once, 68 bytes a weight of the largest matrix: taken where the profile says so
(``[estimate] torchao = "0.1"``, ``stack``), in both paths, and never guessed: taking it for every
pure-half 4-bit job would put LitGPT's (bitsandbytes) load above its step.
"""

from __future__ import annotations

from gpudoc.estimate import terms
from gpudoc.estimate.inputs import ModelShape, TrainSetup, layer_matrix_shapes
from gpudoc.units import format_bytes

LOAD = "load"


def load_library(setup: TrainSetup) -> str:
    return "bitsandbytes" if setup.precision in terms.HALF else setup.stack.nf4_library


def load_phase(shape: ModelShape, setup: TrainSetup, weights: float, *, sharded: bool) -> dict[str, float]:
    """The bytes live at the load's peak: every weight (the 4-bit ones packed), and the temporaries
    of quantizing the largest matrix. Empty where nothing is quantized at load, or a sharding engine
    loads the model (its own load path)."""
    if setup.quantization not in ("nf4", "int4") or sharded:
        return {}
    largest = float(max(i * o for i, o in layer_matrix_shapes(shape).values()))
    return {"weights": weights, "workspace": terms.nf4_load_bytes(largest, library=load_library(setup))}


def load_note(library: str, transient: float) -> str:
    """Said where the load is the peak: what sets it, by which library's code."""
    if library == "bitsandbytes":
        return (f"the peak is at load: bitsandbytes packs each 4-bit weight from its half-precision copy on the "
                f"GPU ({format_bytes(transient)} for the largest)")
    how = "the whole weight at once" if library == "torchao-0.1" else "in chunks of 1024**2 weights"
    return (f"the peak is at load: torchtune's QLoRA quantizes each frozen weight on the GPU (torchao's to_nf4, "
            f"{how}): {format_bytes(transient)} of temporaries for the largest")
