"""A ``torch.compile``'d block's saved tensors (``[train] compile``, ``recompute.compiled``).

AOTAutograd splits a compiled block's joint graph with ``min_cut_rematerialization_partition``
(``torch/_functorch/partitioners.py``): it never recomputes a compute-intensive op (matmuls, SDPA), a
random one, nor a reduction whose output is 4x smaller than its input (``should_ban_recomputation``),
and saves the cheapest set of tensors from which backward recomputes the rest, the pointwise ops.
"""

from __future__ import annotations

from gpudoc.estimate.inputs import ModelShape, TrainSetup, layer_matrix_shapes, n_blocks


def uncheckpointed(shape: ModelShape, setup: TrainSetup, tokens: float, eager: float, notes: list[str], *,
                   act_bytes: float, residual_bytes: float) -> float:
    """What the blocks keep for backward without activation checkpointing: ``eager``, autograd's saved
    tensors of every block, or under ``compile`` what each compiled block's partition saves (``act_bytes``
    an activation, ``residual_bytes`` the residual stream's element, as ``model`` counts them). A decoder
    block keeps each norm's input and per-token statistics (the normalised output, its fp32 copy, RoPE,
    SiLU and the gated product are recomputed from them), SDPA's inputs, output and log-sum-exp, the
    MLP's input projections' outputs (gate and up, or fc1), every dropout's mask and each LoRA adapter's
    A output (and mask): the inputs of the linear layers whose weights train are recomputed too.
    Encoder-decoders, eager attention and 4-bit layers (bitsandbytes' own autograd functions) keep the
    eager count."""
    plain, cross = n_blocks(shape)
    if not setup.compiled or cross or setup.attention == "eager" or setup.quantization != "none":
        return eager
    h, f, e = shape.hidden, shape.ffn, act_bytes
    per_token = 2 * (h * residual_bytes + 8.0) + e * shape.attention_width * (2 + 2 * shape.kv_heads / shape.heads)
    per_token += 4.0 * shape.heads + (2 * f if shape.gated_mlp else f) * e + (2 * h if setup.dropout > 0 else 0.0)
    if setup.lora_rank:
        mats = layer_matrix_shapes(shape)
        for module in setup.lora_modules or tuple((role,) for role in setup.lora_targets):
            if module[0] in mats:
                per_token += setup.lora_rank * 4.0 + (mats[module[0]][0] if setup.lora_dropout > 0 else 0.0)
    notes.append("compile = true without activation checkpointing: each block keeps what torch.compile's partition "
                 "saves (norm inputs, SDPA's tensors, the MLP's input projections) and recomputes the rest")
    return min(plain * tokens * per_token, eager)
