"""LitGPT's own blocks: what they keep for backward beyond the Hugging Face block of the same shapes
that ``model.layer_activation_bytes`` counts. Read in LitGPT's source, ``litgpt/model.py`` and
``litgpt/lora.py`` of litgpt 0.5, the same in ``lit_gpt/model.py`` and ``lit_gpt/lora.py`` of lit-gpt in
2023 (the release of its published resource tables):

- ``CausalSelfAttention`` computes q, k and v with one fused linear and splits its output (``view`` and
  ``permute`` or ``split``, no copy). Rope makes new q and k (``torch.cat`` of the rotated part and the
  rest), but with one query head per key head v is only reshaped, a view of the fused output, and
  ``scaled_dot_product_attention`` saves it: the whole output, (heads + 2 x kv_heads) x head_dim wide,
  stays for backward where a v of its own width is counted. With fewer key heads, k and v are repeated
  to every query head before it (``expand`` and ``reshape`` in 2023, ``repeat_interleave`` in 0.5),
  copies at the queries' width where the formula counts them at their own.
- LoRA on any of q, k and v is one ``LoRAQKVLinear`` over that fused linear: one ``lora_A`` over its
  input and one dropout (``lora_query``/``lora_key``/``lora_value`` say which parts B updates). Where not
  all three are on, ``zero_pad`` places the update with ``index_copy``, whose backward keeps its source
  (autograd's formula for it reads ``source``): the update of the parts that are on, in the adapters'
  dtype.
"""

from __future__ import annotations

from gpudoc.estimate.inputs import ModelShape, TrainSetup

FRAMEWORK = "litgpt"
_QKV = ("q", "k", "v")


def runs(setup: TrainSetup) -> bool:
    """The job is LitGPT's (read from its command or named by [bind] args): its blocks are LitGPT's."""
    return setup.framework == FRAMEWORK


def lora_modules(setup: TrainSetup) -> tuple[tuple[str, ...], ...]:
    """The roles of each layer with an adapter: LitGPT's q, k and v are one fused layer with one."""
    modules = setup.lora_modules or tuple((role,) for role in setup.lora_targets)
    if not runs(setup):
        return modules
    fused = tuple(dict.fromkeys(role for module in modules for role in module if role in _QKV))
    return ((fused,) if fused else ()) + tuple(m for m in modules if not set(m) & set(_QKV))


def saved_beyond_bytes(shape: ModelShape, setup: TrainSetup, *, tokens: float, act_bytes: float, update_bytes: float) -> float:
    """Bytes one LitGPT block keeps for backward beyond the Hugging Face block: the fused q/k/v output
    v is a view of (one query head per key head), less the v counted, or k and v repeated to every
    query head (fewer key heads); and the LoRA update ``index_copy`` keeps, where it updates some of q,
    k and v but not all."""
    if not runs(setup):
        return 0.0
    width = {"q": shape.heads * shape.head_dim, "k": shape.kv_heads * shape.head_dim,
             "v": shape.kv_heads * shape.head_dim}
    repeated = 2 * (width["q"] - width["k"])
    held = tokens * (width["q"] + width["k"] if shape.kv_heads == shape.heads else repeated) * act_bytes
    on = [role for role in _QKV if role in setup.lora_targets] if setup.lora_rank else []
    if 0 < len(on) < len(_QKV):
        held += tokens * sum(width[role] for role in on) * update_bytes
    return held
