"""Compose the terms into per-GPU phases: forward/backward and the optimizer step.

``peak_bytes`` predicts ``torch.cuda.max_memory_allocated()`` in steady state (after the first
optimizer step, when the optimizer states exist). The CUDA context and the allocator's slack are
reported beside it, never inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpudoc.estimate import adapters, compiled, fsdp, litgpt_blocks, megatron, recompute, terms, zero3, zero_settings
from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup, layer_matrix_shapes, layer_params, n_blocks
from gpudoc.estimate.loading import LOAD, load_phase
from gpudoc.estimate.parallel import per_gpu

BREAKDOWN_KEYS = ("weights", "gradients", "optimizer", "activations", "logits", "workspace")
_CALL_ORDER = ("q", "k", "v", "o", "xq", "xk", "xv", "xo", "gate", "up", "down")  # as a block calls its linears


@dataclass(frozen=True)
class Phases:
    """Bytes per GPU of each component in each phase; ``linear`` splits forward/backward into a part
    that does not grow with the micro batch and one that does (for corrections from runs)."""

    forward_backward: dict[str, float]
    optimizer_step: dict[str, float]
    notes: tuple[str, ...] = field(default_factory=tuple)
    load: dict[str, float] = field(default_factory=dict)  # a 4-bit model's quantization at load (``loading``)
    resident: float = 0.0  # allocated once and kept (weights, optimizer states, master copies): no allocator slack

    @property
    def fb_total(self) -> float:
        return sum(self.forward_backward.values())

    @property
    def step_total(self) -> float:
        return sum(self.optimizer_step.values())

    @property
    def peak(self) -> float:
        return max(self.fb_total, self.step_total, sum(self.load.values()))

    @property
    def peak_phase(self) -> str:
        if sum(self.load.values()) > max(self.fb_total, self.step_total):
            return LOAD
        return "forward_backward" if self.fb_total >= self.step_total else "optimizer_step"

    @property
    def breakdown(self) -> dict[str, float]:
        return {LOAD: self.load, "forward_backward": self.forward_backward}.get(self.peak_phase, self.optimizer_step)


def _sharded_engine(setup: TrainSetup) -> bool:
    """Half-precision parameters with an fp32 master copy: DeepSpeed's, FSDP's, Megatron-LM's."""
    return setup.sharding_stage > 0 or setup.fsdp or megatron.runs(setup)


def kbit_mixed(setup: TrainSetup) -> bool:
    """QLoRA under autocast (the HF Trainer + peft path): ``prepare_model_for_kbit_training`` casts every
    weight that is not quantized (embeddings, head, norms) to fp32, so the head's logits are fp32 too
    (the residual stream is fp32 under autocast anyway). Pure half-precision training (LitGPT,
    torchtune) keeps them half."""
    return setup.quantization != "none" and setup.lora_rank > 0 and setup.precision in terms.HALF \
        and not _sharded_engine(setup)


def act_bytes(setup: TrainSetup) -> float:
    """Bytes of one saved activation element: 4 in fp32 training, else 2 (the 4-bit layers save the
    half-precision copy of their input they compute with)."""
    return 4.0 if setup.precision == "fp32" else 2.0


def adapter_bytes(setup: TrainSetup) -> adapters.Bytes:
    """The trainable parameters' bytes, a LoRA adapter's or the model's, and what adapters keep."""
    return adapters.of_setup(setup, sharded_engine=_sharded_engine(setup), layer_input_bytes=act_bytes(setup))


def _saving_roles(setup: TrainSetup) -> set[str]:
    """Linear layers whose input autograd keeps: trainable weights (full fine-tune) or LoRA-targeted
    ones whose adapters take that input as it is (else each keeps its own copy, counted with the
    adapters); bitsandbytes' 4/8-bit matmul functions keep their input whenever any input needs grad."""
    all_roles = {"q", "k", "v", "o", "gate", "up", "down", "head"}
    if (setup.lora_rank == 0 and setup.quantization == "none") or zero3.runs(setup):  # zero.Init's F.linear
        return all_roles
    roles = set(setup.lora_targets) if setup.lora_rank else set()
    if roles and adapter_bytes(setup).own_input:
        roles &= {"head"}  # no per-layer adapter term covers the head's
    if setup.quantization != "none":
        roles |= all_roles - {"head"}
    return roles


def layer_activation_bytes(shape: ModelShape, setup: TrainSetup, *, tokens: float, batch: int,
                           cross_attention: bool = False, kv_seq: int = 0) -> tuple[float, float, float]:
    """Bytes one transformer block saves for backward: (total, attention-score part, matmul outputs
    for op-level selective checkpointing). Per-term derivation in ``terms``; Korthikanti's
    34sbh + 5as^2b is the special case fp16, GELU, ffn = 4h, dropout, eager, full fine-tune.
    ``kv_seq``: the encoder's length, which a decoder block's cross-attention scores span."""
    h, f, s = shape.hidden, shape.ffn, setup.seq_len
    a = shape.attention_width  # h, unless heads x head_dim differs from it (Gemma, Qwen3)
    e = act_bytes(setup)
    amp = terms.uses_autocast(setup.precision, _sharded_engine(setup))
    residual = 4.0 if (amp or setup.precision == "fp32") else e
    full_ft = setup.lora_rank == 0 and setup.quantization == "none"
    roles = _saving_roles(setup)
    score = 4.0 if (setup.precision == "fp32" or amp) else 2.0

    norm = terms.norm_saved_bytes(tokens, h, norm=shape.norm, act_bytes=e, residual_bytes=residual,
                                  weight_trainable=full_ft)
    total = 0.0
    scores = 0.0
    blocks = 2 if cross_attention else 1
    for block in range(blocks):
        total += norm
        if roles & {"q", "k", "v"}:
            total += tokens * h * e
        sbh, s2 = terms.attention_saved_bytes(
            tokens=tokens, batch=batch, seq=s, hidden=a, heads=shape.heads, kv_heads=shape.kv_heads,
            act_bytes=e, attention=setup.attention, dropout=setup.dropout, score_bytes=score, amp_cast=amp)
        if block == 1 and kv_seq:
            s2 *= kv_seq / s  # cross-attention: decoder queries x encoder keys
        total += sbh + s2
        scores += s2
        if "o" in roles and setup.attention == "eager":
            # SDPA/flash return (b, s, heads, head_dim) memory, so the projection's input after
            # transpose(1, 2).contiguous() is the attention output itself; eager needs a copy.
            total += tokens * a * e
        if setup.dropout > 0:
            total += terms.dropout_mask_bytes(tokens, h)
    total += norm
    if roles & {"gate", "up"}:
        total += tokens * h * e
    total += terms.mlp_saved_bytes(tokens, h, f, gated=shape.gated_mlp, act_bytes=e,
                                   down_input_saved="down" in roles)
    if shape.activation in terms.COMPOSED_TANH_GELU and not shape.gated_mlp:
        total += terms.composed_gelu_saved_bytes(tokens, f, act_bytes=e, widened=amp or setup.precision == "fp32")
    if setup.dropout > 0:
        total += terms.dropout_mask_bytes(tokens, h)
    # One adapter per wrapped layer: a fused one (c_attn, query_key_value, LitGPT's qkv) has one A and one dropout.
    mats, own, a_out = layer_matrix_shapes(shape), adapter_bytes(setup).own_input, adapter_bytes(setup).compute
    for module in litgpt_blocks.lora_modules(setup) if setup.lora_rank else ():
        if module[0] in mats:  # A's output, saved by B, and the adapter's own copy of its input
            total += tokens * setup.lora_rank * a_out + tokens * mats[module[0]][0] * own
    total += litgpt_blocks.saved_beyond_bytes(shape, setup, tokens=tokens, act_bytes=e, update_bytes=a_out)
    calls = layer_matrix_shapes(shape, cross_attention=cross_attention)
    kept = recompute.op_sac_matmul_widths([(r, calls[r][1]) for r in _CALL_ORDER if r in calls], compiled=setup.compiled)
    return total, scores, tokens * e * kept


def activation_bytes(shape: ModelShape, setup: TrainSetup) -> tuple[float, float, list[str]]:
    """Saved activations at the start of backward, checkpointing applied, and the block it recomputes at
    a time. Encoder-decoder models: the decoder's blocks see ``target_len`` tokens per sample. A pipeline
    stage keeps ``in_flight`` micro batches' activations of its blocks (1F1B)."""
    notes: list[str] = []
    b, s = setup.micro_batch_size, setup.seq_len
    t = setup.target_len or s
    tokens, dec_tokens = float(b * s), float(b * t)
    h = shape.hidden
    e = act_bytes(setup)
    amp = terms.uses_autocast(setup.precision, _sharded_engine(setup))
    plain, cross = n_blocks(shape)
    layer, layer_scores, mm_out = layer_activation_bytes(shape, setup, tokens=tokens, batch=b)
    xlayer, xscores, xmm = layer, layer_scores, mm_out
    if cross:
        xlayer, xscores, xmm = layer_activation_bytes(shape, replace(setup, seq_len=t), tokens=dec_tokens, batch=b,
                                                      cross_attention=True, kv_seq=s)
    largest = max(layer, xlayer) if cross else layer

    residual = 4.0 if (amp or setup.precision == "fp32") else e
    full_ft = setup.lora_rank == 0 and setup.quantization == "none"
    outside = terms.norm_saved_bytes(dec_tokens, h, norm=shape.norm, act_bytes=e, residual_bytes=residual,
                                     weight_trainable=full_ft)
    if setup.dropout > 0:
        outside += terms.dropout_mask_bytes(dec_tokens, h)
    if "head" in _saving_roles(setup) and setup.loss != "classification":
        outside += dec_tokens * h * e
    if cross:
        outside += tokens * h * e  # encoder output, read by every cross-attention

    mode = setup.gradient_checkpointing
    if mode == "full":
        # Each micro batch in flight keeps its checkpoints; one layer at a time is recomputed.
        held = terms.checkpointed_bytes(plain, tokens, h, residual) + terms.checkpointed_bytes(cross, dec_tokens, h, residual)
        once = largest
    elif mode == "selective" and setup.attention == "eager":
        # Korthikanti sec. 4.3: recompute only the attention core, drop the a*s^2 terms.
        held = plain * (layer - layer_scores) + cross * (xlayer - xscores)
        once = max(layer_scores, xscores)
    elif mode == "selective":
        # With SDPA there is no s^2 term to drop; op-level selective checkpointing (torchtitan's "op"
        # policy) keeps the layer input, the attention output and log-sum-exp, and every other matmul
        # output but those a compiled block's backward never reads (``recompute.op_sac_matmul_widths``).
        kept = h * residual + h * e + shape.heads * 4.0
        held = plain * min(tokens * kept + mm_out, layer) + cross * min(dec_tokens * kept + xmm, xlayer)
        once = largest
        notes.append("selective checkpointing with SDPA: modelled as op-level selective checkpointing (attention "
                     f"outputs and every other matmul output kept{', compiled' if setup.compiled else ''})")
    else:  # as autograd keeps them, or a compiled block's partition (``compiled.uncheckpointed``)
        held, once = compiled.uncheckpointed(shape, setup, tokens, plain * layer + cross * xlayer, notes,
                                             act_bytes=e, residual_bytes=residual), 0.0
    return held * setup.in_flight + outside, once, notes


def backward_peak(shape: ModelShape, setup: TrainSetup) -> tuple[float, float, list[str]]:
    """(activations, logits) at the backward's peak: a recomputed block counts only beyond the loss's
    buffers, freed before it is recomputed (``recompute.recompute_beyond_loss``)."""
    held, once, notes = activation_bytes(shape, setup)
    tokens = float(setup.micro_batch_size * (setup.target_len or setup.seq_len))
    # An fp32 head gives fp32 logits, as does a model that returns them upcast (torchtune's).
    e = 4.0 if kbit_mixed(setup) or setup.loss == "fp32_logits" else act_bytes(setup)
    logits = terms.logits_bytes(tokens, shape.vocab, logits_dtype_bytes=e, loss=setup.loss, upcast=setup.loss_upcast)
    # The logits the output holds through backward: the model's, LitGPT's fp32 chunks.
    kept = tokens * shape.vocab * (4.0 if setup.loss == "fp32_chunks" else e) if logits else 0.0
    return held + recompute.recompute_beyond_loss(once, logits, kept), logits, notes


def per_sample_activation_bytes_for(inputs: Inputs) -> float:
    """Activations + logits of one sequence (micro batch 1): the slope the ladder works with."""
    one = inputs.with_micro_batch(1)
    shape, setup, _ = per_gpu(one.shape, one.setup)
    return sum(backward_peak(shape, setup)[:2])


def compute_phases(inputs: Inputs) -> Phases:
    shape, setup, notes = per_gpu(inputs.shape, inputs.setup)
    engine = _sharded_engine(setup)
    stage = setup.sharding_stage
    world = setup.world_size
    amp = terms.uses_autocast(setup.precision, engine)
    true_half = setup.precision in terms.TRUE_HALF

    plain, cross = n_blocks(shape)
    mats = layer_matrix_shapes(shape)
    block_linear = float(plain * sum(i * o for i, o in mats.values())
                         + cross * sum(i * o for i, o in layer_matrix_shapes(shape, cross_attention=True).values()))
    emb = float(shape.vocab * shape.hidden)
    head = 0.0 if shape.tied_embeddings else emb
    total = float(shape.params)
    other = max(0.0, total - block_linear - emb - head)
    block_linear = min(block_linear, total)

    # --- what trains -------------------------------------------------------------------------
    quantized = min(total, block_linear + shape.idle_expert_params) if setup.quantization != "none" else 0.0
    if setup.lora_rank:
        targeted = [mats[r] for r in setup.lora_targets if r in mats]
        trainable = float(plain + cross) * terms.lora_params(targeted, setup.lora_rank)
        if "head" in setup.lora_targets:
            trainable += terms.lora_params([(shape.hidden, shape.vocab)], setup.lora_rank)
        frozen = total
    elif setup.quantization != "none":
        notes.append(f"quantization = {setup.quantization} without LoRA: quantized weights cannot train; "
                     "only the other parameters are counted as trainable")
        trainable = total - quantized
        frozen = quantized
    else:
        trainable = total
        frozen = 0.0

    if setup.lora_rank:
        # Frozen bases are loaded in the compute dtype (fp32 only when training in fp32); the adapters'
        # dtype is their library's (``adapter_bytes``).
        base_bytes = 4.0 if setup.precision == "fp32" or kbit_mixed(setup) else 2.0
    else:
        base_bytes = terms.param_bytes(setup.precision, engine)
    weights = (quantized * terms.quantized_weight_bytes(setup.quantization, shape.hidden) if quantized else 0.0)
    weights += (frozen - quantized) * base_bytes if setup.lora_rank or quantized else 0.0
    grad_b = adapter_bytes(setup).param  # a gradient has its parameter's dtype (``terms.gradient_bytes``)
    weights += trainable * grad_b
    grads = trainable * grad_b
    state_dtype = 2.0 if true_half and grad_b < 4 else 4.0  # torch's states follow the parameter's dtype
    if setup.optimizer == "adafactor":
        if setup.lora_rank:
            per_layer = [(setup.lora_rank, m[0]) for r, m in mats.items() if r in setup.lora_targets]
            per_layer += [(m[1], setup.lora_rank) for r, m in mats.items() if r in setup.lora_targets]
            matrices = per_layer * (plain + cross)
            vectors = 0.0
        else:
            matrices = list(mats.values()) * (plain + cross) + [(shape.vocab, shape.hidden)] * (1 if head == 0 else 2)
            vectors = other
        optimizer = terms.adafactor_state_bytes(matrices, vectors) * (state_dtype / 4.0)
    else:
        optimizer = trainable * terms.optimizer_state_bytes(setup.optimizer, state_dtype, momentum=setup.momentum)
    master = trainable * terms.master_weight_bytes(setup.precision, engine)
    largest_matrix = float(max([i * o for i, o in mats.values()] + [emb]))
    step_temp = terms.optimizer_step_temp_bytes(setup.optimizer, trainable, state_dtype, largest_matrix, impl=setup.stack.optimizer_impl)

    # --- sharding and offload ----------------------------------------------------------------
    workspace_fb = 0.0
    workspace_step = 0.0
    compute_bytes = 4.0 if setup.precision == "fp32" else 2.0
    unit = max(float(layer_params(shape, cross_attention=bool(cross))), emb)
    if stage >= 1:
        optimizer = terms.zero_shard(optimizer, world)
        master = terms.zero_shard(master, world)
        step_temp = terms.zero_shard(step_temp, world)
    # DeepSpeed ZeRO-1/2 (``DeepSpeedZeroOptimizer``): its reduce bucket in backward, and in the step the
    # share flattened and cast to fp32 (``terms.zero12_*``).
    deepspeed12 = stage in (1, 2) and not setup.fsdp and not megatron.runs(setup)
    step_grads: tuple[float, float] | None = None
    # DeepSpeed ZeRO-3 (``zero_stage = 3`` without ``fsdp``), sharded or offloaded on one GPU.
    deepspeed3 = zero3.runs(setup)
    if deepspeed12:
        z = zero_settings.settings(setup.zero_settings, shape.hidden, stage)
        offload = setup.offload_optimizer  # the host's fp32 share steps: contiguous_gradients forced on
        bucket = terms.zero12_bucket_bytes(grad_b, bucket=z.reduce_bucket, buffers=z.buckets,
                                           contiguous=z.contiguous_gradients or offload, gradients=trainable)
        workspace_fb += bucket
        if offload:  # each gradient leaves through temp_grad_buffer_for_gpu_offload, held for good
            workspace_fb += min(trainable, largest_matrix) * grad_b
            workspace_step += min(trainable, largest_matrix) * grad_b
        else:
            step_grads = terms.zero12_step_gradient_bytes(stage, trainable, world, grad_b, step_temp, bucket)
        notes.append(f"ZeRO-{stage}: reduce bucket {z.reduce_bucket:.3g} elements x {z.buckets}"
                     f"{'' if z.contiguous_gradients or offload else ' at most (contiguous_gradients off)'}"
                     f"{', optimizer on the host' if offload else ''}, from {zero_settings.describe(setup.zero_settings)}")
    if stage >= 2:
        full_grads = grads
        grads = terms.zero_shard(grads, world)
        if not deepspeed12 and not deepspeed3:  # the unsharded gradients of the units FSDP is reducing
            workspace_fb += min(full_grads, 2 * unit * grad_b)
    if stage >= 3:
        weights = terms.zero_shard(weights, world)
        workspace_fb += zero3.gathered_params_for(shape, setup, total, unit, notes) * compute_bytes
    elif world > 1 and stage == 0 and not megatron.runs(setup):  # Megatron's grad buffer is its bucket
        workspace_fb += terms.ddp_bucket_bytes(grads)
        workspace_step += terms.ddp_bucket_bytes(grads)
    held = fsdp.accumulated(setup, pipelined=inputs.setup.pipeline_parallel > 1, params=total, trainable=trainable,
                            block_params=total - emb - head, compute_bytes=compute_bytes, notes=notes)
    if setup.offload_optimizer:
        optimizer = master = step_temp = 0.0
        if deepspeed12 and stage == 2:
            grads = 0.0  # the share goes to the host as it is reduced (copy_grads_in_partition)
    if setup.offload_params:
        if setup.zero_stage < 3 and not setup.fsdp:
            notes.append("offload_params is ZeRO-3's (DeepSpeed offload_param) or FSDP's CPU offload; "
                         "counted as offloaded anyway")
        weights = 0.0
        if stage < 3:  # one GPU: the engine still gathers the parameters it computes with
            workspace_fb += zero3.gathered_params_for(shape, setup, total, unit, notes) * compute_bytes
        if setup.offload_optimizer and not setup.fsdp and not deepspeed3:
            # ZeRO-Infinity: gradients leave the GPU through the reduce bucket to the CPU optimizer.
            grads = min(grads, terms.REDUCE_BUCKET_SIZE * grad_b)
    if deepspeed3:
        # Its reduce bucket, the reduce's flattened copy and, offloaded, the largest share's copies
        # (``terms.zero3_gradient_buffer_bytes``): FSDP's two units of gradients where those are more
        # (``zero_stage = 3`` does not say which engine).
        # In the engine's gradient dtype: on one GPU the rest of the formula reads fp32 parameters.
        largest, engine_grad = min(trainable, largest_matrix), terms.gradient_bytes(setup.precision, True)
        z3 = zero_settings.settings(setup.zero_settings, shape.hidden)
        buffers = terms.zero3_gradient_buffer_bytes(trainable, largest, world, engine_grad,
                                                    offload_optimizer=setup.offload_optimizer, bucket=z3.reduce_bucket)
        # Held for good: the bucket. The optimizer on the GPU casts one sub-group's gradients to fp32 at a
        # time in the step (``_prepare_fp32_grad_for_sub_group``; the start-up buffer goes at the first step).
        sub_group = 0.0 if setup.offload_optimizer else 4.0 * min(trainable / max(1, world), z3.sub_group)
        workspace_fb += max(buffers, min(trainable * grad_b, 2 * unit * grad_b))
        workspace_step += z3.reduce_bucket * engine_grad + sub_group
        if setup.offload_optimizer:
            grads = 0.0  # the gradients' share is the host's (grad_partitions_flat_buffer)
    if setup.zero_stage and world <= 1:
        notes.append("zero_stage > 0 with a world size of 1 shards nothing")

    # --- activations and friends -------------------------------------------------------------
    acts, logits, act_notes = backward_peak(shape, setup)
    notes.extend(act_notes)
    if amp:
        matmul_weights = (block_linear + (head or emb)) if not setup.lora_rank else trainable
        workspace_fb += terms.amp_cast_bytes(matmul_weights)
    if setup.quantization != "none":
        # One matrix is dequantized to the compute dtype at a time (bitsandbytes / torchao NF4).
        workspace_fb += float(max(i * o for i, o in mats.values())) * compute_bytes

    load = load_phase(shape, setup, weights, sharded=engine)
    if setup.optimizer_in_backward:
        # One gradient at a time, stepped and freed in backward (torchtune's optimizer_in_bwd hooks): the largest trained.
        grads_fb = (float(max(i * o for i, o in mats.values())) if setup.lora_rank else largest_matrix) * grad_b
        fb = {"weights": weights, "gradients": grads_fb, "optimizer": optimizer + master,
              "activations": acts, "logits": logits, "workspace": workspace_fb}
        step = {"weights": weights, "gradients": grads_fb, "optimizer": optimizer + master + step_temp,
                "activations": 0.0, "logits": 0.0, "workspace": 0.0}
        return Phases(fb, step, tuple(notes), load, weights + optimizer + master)

    # With gradient accumulation the gradients of earlier micro batches stay through the next
    # forward; with one micro batch, zero_grad(set_to_none=True) (the default since PyTorch 2.0)
    # frees them and they come back as the activations are released. Before 2.0 it zeroed them in place.
    grads_fb = grads if setup.gradient_accumulation_steps > 1 or not setup.stack.zero_grad_frees else 0.0
    if megatron.runs(setup):  # its grad buffer, resident; its optimizer's fp32 copies; its fused Adam
        state = megatron.model_state(setup, trainable, frozen)
        weights, grads = state.weights, state.gradients
        grads_fb, optimizer, master, step_temp = grads, state.optimizer, 0.0, 0.0
        notes.append(megatron.note(setup))
    grads_fb, gathered = held or (grads_fb, 0.0)  # FSDP's unsharded gradients until the last micro batch
    fb = {"weights": weights + gathered, "gradients": grads_fb, "optimizer": optimizer + master,
          "activations": acts, "logits": logits, "workspace": workspace_fb}
    step = {"weights": weights, "gradients": grads, "optimizer": optimizer + master + step_temp,
            "activations": 0.0, "logits": 0.0, "workspace": workspace_step}
    if step_grads is not None:
        step.update(gradients=step_grads[0], optimizer=optimizer + master, workspace=step_grads[1])
    return Phases(fb, step, tuple(notes), load, weights + optimizer + master)
