"""What LoRA adapters hold: the dtype of their parameters, and what each keeps of its input for backward.

peft (0.12 on): ``LoraLayer.update_layer`` creates an adapter in its base layer's dtype
(``_move_adapter_to_device_of_base_layer``), then ``get_peft_model(autocast_adapter_dtype=True)``, the
default, upcasts fp16/bf16 adapters to fp32 (``cast_adapter_dtype``): its adapters, their gradients and
their optimizer states are fp32 whatever the base. Its ``Linear.forward`` casts the layer's input to
the adapter's dtype (``_cast_input_dtype``) before ``lora_B(lora_A(dropout(x)))``, and ``lora_dropout =
0`` is an ``nn.Identity`` (no mask). A framework's own adapters (torchtune's ``LoRALinear``, LitGPT's
``LoRALinear``) are created in the model's dtype and take the input as it is.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gpudoc.estimate import terms
from gpudoc.estimate.defaults import job_framework

PEFT, OWN = "peft", "own"
# Frameworks whose recipes build their own LoRA layers rather than peft's.
OWN_ADAPTER_FRAMEWORKS = frozenset({"torchtune", "litgpt"})


def library(profile: Any) -> str:
    """Whose adapters the job trains: its own where a ``[model] factory`` builds the model (LitGPT's
    user) or the job is a torchtune or LitGPT recipe, as read from its command or named by the
    profile's ``[bind] args``; peft's otherwise (gpudoc reads LoRA as peft does)."""
    return OWN if profile.model.get("factory") or job_framework(profile) in OWN_ADAPTER_FRAMEWORKS else PEFT


def param_bytes(adapters: str, model_param_bytes: float, *, sharded_engine: bool) -> float:
    """Bytes of one adapter parameter, and of its gradient: 4 for peft's, unless an engine (DeepSpeed
    ZeRO, FSDP mixed precision) casts the whole module to half after peft has wrapped it; a framework's
    own adapters have the model's parameter dtype."""
    return 4.0 if adapters == PEFT and not sharded_engine else model_param_bytes


def compute_bytes(adapter_bytes: float, *, autocast: bool) -> float:
    """Bytes of an element the adapter computes with: half under autocast, else its own dtype."""
    return 2.0 if autocast else adapter_bytes


def input_bytes(adapter_bytes: float, layer_input_bytes: float, *, autocast: bool, dropout: bool) -> float:
    """Bytes per element of its layer's input that each adapter keeps for backward; 0 where ``lora_A``
    keeps that input itself (shared by every adapter on it, counted once with the layer).

    With dropout: its 1-byte mask (CUDA's ``native_dropout``) and ``lora_A``'s input, the dropout output
    (under autocast, its half cast). Without: a copy per adapter wherever the input is cast on the way
    to ``lora_A`` (peft's cast to fp32 of a half input, autocast's cast to half), else none."""
    compute = compute_bytes(adapter_bytes, autocast=autocast)
    if dropout:
        return 1.0 + compute
    return compute if autocast or adapter_bytes != layer_input_bytes else 0.0


class Bytes(NamedTuple):
    """Of one trainable parameter (and its gradient); of an element a LoRA adapter computes with; of its
    layer's input each adapter keeps of its own, per element (``input_bytes``)."""

    param: float
    compute: float
    own_input: float


def of_setup(setup: Any, *, sharded_engine: bool, layer_input_bytes: float) -> Bytes:
    """The trainable parameters' ``Bytes`` in a training setup: a LoRA adapter's, else the model's own."""
    model = terms.param_bytes(setup.precision, sharded_engine)
    if not setup.lora_rank:
        return Bytes(model, model, 0.0)
    adapter = param_bytes(setup.lora_adapters, model, sharded_engine=sharded_engine)
    autocast = terms.uses_autocast(setup.precision, sharded_engine)
    return Bytes(adapter, compute_bytes(adapter, autocast=autocast),
                 input_bytes(adapter, layer_input_bytes, autocast=autocast, dropout=setup.lora_dropout > 0))
