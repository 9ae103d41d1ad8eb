"""Tensor, pipeline and context parallelism (``[launch] tensor_parallel``, ``pipeline_parallel``,
``context_parallel``): the share of the model and of the sequence one GPU holds.

Each degree divides what it divides, and nothing else:
- tensor parallel (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053 sec. 3): attention heads, the
  MLP's width and the vocabulary (embedding, head, logits: vocab-parallel) split over ``tp`` GPUs;
  the norms, the residual stream and the dropout masks stay whole on each (no sequence parallelism,
  Korthikanti et al. 2022 sec. 4.2.2: the more expensive reading).
- pipeline parallel: each stage holds ``layers / pp`` blocks; under 1F1B (Narayanan et al. 2021,
  arXiv:2104.04473 sec. 2.2) the first stage keeps up to ``pp`` micro batches in flight (no more
  than there are micro batches: ``gradient_accumulation_steps``, as DeepSpeed's pipeline engine
  counts them) — as much as one micro batch through the whole model. The embedding and the head
  are both counted on that stage (the more expensive reading).
- context parallel (ring attention; torchtitan, Megatron-LM ``--context-parallel-size``): each GPU
  holds ``seq / cp`` of every sequence; ZeRO/FSDP shard over data parallel x context parallel.
"""

from __future__ import annotations

from dataclasses import replace

from gpudoc.estimate.inputs import ModelShape, TrainSetup, params_from_shapes


def _split(n: int, parts: int) -> int:
    return max(1, -(-n // parts))


def per_gpu(shape: ModelShape, setup: TrainSetup) -> tuple[ModelShape, TrainSetup, list[str]]:
    """The model and knobs as one GPU sees them, and notes on what was read how."""
    tp, pp, cp = setup.tensor_parallel, setup.pipeline_parallel, setup.context_parallel
    if tp == pp == cp == 1:
        return shape, setup, []
    notes: list[str] = []
    view = shape
    if tp > 1:
        view = replace(view, heads=_split(view.heads, tp), kv_heads=_split(view.kv_heads, tp),
                       ffn=_split(view.ffn, tp), vocab=_split(view.vocab, tp),
                       attention_head_dim=view.head_dim, idle_expert_params=view.idle_expert_params / tp)
        notes.append(f"tensor_parallel = {tp}: heads, MLP width and vocabulary split {tp} ways; norms, residual "
                     "stream and dropout masks whole on each GPU (no sequence parallelism assumed)")
    in_flight = 1
    if pp > 1:
        if view.arch == "encoder-decoder" and view.encoder_layers and view.decoder_layers:
            view = replace(view, encoder_layers=_split(view.encoder_layers, pp),
                           decoder_layers=_split(view.decoder_layers, pp))
            view = replace(view, layers=view.encoder_layers + view.decoder_layers)
        else:
            view = replace(view, layers=_split(view.layers, pp))
        in_flight = min(pp, setup.gradient_accumulation_steps)
        notes.append(f"pipeline_parallel = {pp}: {view.layers} blocks per stage; the first stage holds "
                     f"{in_flight} micro batch(es) in flight (1F1B, at most gradient_accumulation_steps), and "
                     "the embedding and the head are counted on one stage")
    if view is not shape:
        # The given parameter count, scaled by the share of the shapes this GPU holds.
        view = replace(view, params=shape.params * params_from_shapes(view) / params_from_shapes(shape))
    seq, target = setup.seq_len, setup.target_len
    if cp > 1:
        seq, target = _split(seq, cp), (_split(target, cp) if target else 0)
        notes.append(f"context_parallel = {cp}: {seq} tokens of each sequence per GPU")
    world = setup.world_size // (tp * pp)  # the data-parallel x context-parallel group ZeRO/FSDP shard over
    return view, replace(setup, seq_len=seq, target_len=target, world_size=max(1, world), tensor_parallel=1,
                         pipeline_parallel=1, context_parallel=1, in_flight=in_flight), notes
