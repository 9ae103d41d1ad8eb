"""Activation checkpointing beyond the checkpoints themselves: what an op-level selective policy keeps
(and what ``torch.compile`` leaves of it), and when the block recomputed in backward is live.

Sources:
- torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` (9dec370, the commit of its published
  Llama 3.1 benchmarks): ``_apply_ac_to_transformer_block`` wraps each block in ``checkpoint_wrapper``
  with ``create_selective_checkpoint_contexts`` and a policy that saves the outputs of ``aten.mm`` but
  every second one (a counter per block call) and of the SDPA kernels, and recomputes the rest;
  ``apply_compile`` then compiles each wrapped block (``torch.compile(block, fullgraph=True)``).
- PyTorch ``torch/utils/checkpoint.py``: in eager mode ``_CachingTorchDispatchMode`` stores the output of
  every op the policy marks MUST_SAVE, whether the backward reads it or not. ``torch/_functorch/
  partitioners.py``: a compiled block's min-cut partitioner bans the recomputation of MUST_SAVE nodes
  but saves only the nodes the backward graph needs.
- torchtitan ``train.py`` and torchtune's recipes (``del logits``/``del pred`` before ``backward``), and
  Hugging Face's loss: the vocabulary-sized buffers of the loss's backward are freed when the gradient
  reaches the head, before the last block's backward recomputes that block.
"""

from __future__ import annotations

from typing import Any

from gpudoc.errors import ProfileError


def compiled(train: Any) -> bool:
    """``[train] compile``: the job's transformer blocks run under ``torch.compile`` (torchtitan's
    ``--training.compile``, torchtune's ``compile=True``). True or false; anything else is refused."""
    value = train.get("compile", False)
    if not isinstance(value, bool):
        raise ProfileError(f"[train] compile = {value!r}: expected true or false (whether the job's blocks are "
                           "torch.compile'd)", key="train.compile")
    return value


def op_sac_matmul_widths(widths: list[tuple[str, int]], *, compiled: bool) -> int:
    """Summed output widths of the block's matmuls that op-level selective checkpointing keeps.

    ``widths``: each linear's (role, output width) in the order the block calls them (torchtitan's Llama:
    wq, wk, wv, wo, w1, w3, w2). The policy's counter keeps the first, third, fifth, ... output. Eager mode
    keeps them all; a compiled block leaves out the outputs its backward never reads: a projection back
    onto the residual stream (``o``, ``xo``, ``down``), whose output only the residual add takes.
    """
    kept = [(role, width) for index, (role, width) in enumerate(widths) if index % 2 == 0]
    return sum(width for role, width in kept if not (compiled and role in ("o", "xo", "down")))


def recompute_beyond_loss(once: float, loss_peak: float, logits_kept: float) -> float:
    """What a checkpointed block's recomputation adds to the backward's peak beyond the loss's.

    The loss's backward peaks with its vocabulary-sized buffers (``loss_peak``); they are freed as its
    gradient reaches the head, and only then does the last block's backward recompute that block
    (``once``), beside what of the logits outlives the loss (``logits_kept``: the model's output, held
    by the output object through backward). The two peaks never coexist: the larger one counts.
    """
    return max(0.0, once + logits_kept - loss_peak)
