"""The memory model's terms: small pure functions, each with the source it follows.

Units: bytes, element counts and parameter counts as floats (a 405B model times 16 B overflows
nothing in Python, but fractional bytes per parameter — NF4's 0.516 — need floats). Callers round.

Sources cited below:
- ZeRO: Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
  Models", arXiv:1910.02054 (sec. 3.1 model states, 2+2+12 = 16 B/param; sec. 5 stages 1-3).
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  arXiv:2205.05198 (sec. 4.1: sbh(34 + 5as/h) bytes per layer; sec. 4.3 selective recomputation).
- QLoRA: Dettmers et al. 2023, arXiv:2305.14314 (sec. 3: NF4, double quantization).
- LoRA: Hu et al. 2021, arXiv:2106.09685 (sec. 4.1: W + BA, B in R^{d x r}, A in R^{r x k}).
- Adafactor: Shazeer & Stern 2018, arXiv:1804.04235 (sec. 3: factored second moments).
- 8-bit optimizers: Dettmers et al. 2021, arXiv:2110.02861 (block-wise 8-bit states).
- PyTorch AMP docs ("Automatic Mixed Precision package - torch.amp": ops that autocast to float32,
  e.g. softmax, layer_norm; the weight-cast cache of ``torch.autocast(cache_enabled=True)``).
- PyTorch DDP docs (``DistributedDataParallel(gradient_as_bucket_view=...)``: buckets hold a copy
  of the gradients unless they are views).
- FlashAttention: Dao et al. 2022, arXiv:2205.14135 (no s x s matrix is stored; the backward
  recomputes it from Q, K, V, the output and the softmax log-sum-exp).
"""

from __future__ import annotations

from typing import Iterable

MIB = 1024**2

# --- bytes per parameter ---------------------------------------------------------------------------

HALF = ("fp16", "bf16")
TRUE_HALF = ("bf16-true", "fp16-true")


def uses_autocast(precision: str, sharded_engine: bool) -> bool:
    """torch.autocast mixed precision: fp32 parameters, half-precision matmuls (PyTorch AMP docs).

    Under DeepSpeed/FSDP mixed precision the engine keeps half-precision parameters instead
    (ZeRO sec. 3.1), so autocast's casts do not apply.
    """
    return precision in HALF and not sharded_engine


def param_bytes(precision: str, sharded_engine: bool) -> float:
    """Bytes of one trainable parameter as stored on the GPU for compute.

    fp32: 4. torch.autocast (fp16/bf16 mixed, no engine): the parameters ARE fp32 (4) and autocast
    casts them per op; there is no separate master copy (PyTorch AMP docs). DeepSpeed ZeRO /
    FSDP mixed precision: half-precision parameters (2) plus an fp32 master copy held by the
    optimizer (ZeRO sec. 3.1). ``bf16-true``/``fp16-true``: half parameters, no master (2).
    """
    if precision == "fp32":
        return 4.0
    if precision in HALF:
        return 2.0 if sharded_engine else 4.0
    return 2.0


def master_weight_bytes(precision: str, sharded_engine: bool) -> float:
    """fp32 master copy per trainable parameter: 4 B under engine mixed precision (ZeRO's
    "fp32 parameters" in K = 12), 0 under torch.autocast (the parameters are already fp32) and
    under pure half or fp32 training."""
    return 4.0 if precision in HALF and sharded_engine else 0.0


def gradient_bytes(precision: str, sharded_engine: bool) -> float:
    """A gradient has its parameter's dtype (PyTorch autograd accumulates into ``param.grad`` of
    the same dtype); under ZeRO mixed precision the gradients are fp16/bf16 (ZeRO sec. 3.1: 2 B)."""
    return param_bytes(precision, sharded_engine)


def quantized_weight_bytes(quantization: str, in_features: int = 4096) -> float:
    """Bytes per frozen quantized weight.

    NF4/4-bit: 0.5 B for the 4-bit code plus quantization constants; QLoRA (sec. 3, "Double
    Quantization") puts the constants at 32/64 = 0.5 bit/param with block size 64, and 8/64 +
    32/(64*256) = 0.127 bit/param with double quantization (the common setting): 0.5 + 0.127/8.
    int8 (LLM.int8(), Dettmers et al. 2022, arXiv:2208.07339): 1 B plus one fp32 scale per row.
    """
    if quantization in ("nf4", "int4"):
        return 0.5 + 0.127 / 8
    if quantization == "int8":
        return 1.0 + 4.0 / max(1, in_features)
    raise ValueError(f"not a quantization: {quantization}")


# torchao's CHUNK_SIZE (torchao/dtypes/nf4tensor.py, from 0.2): weights quantized per chunk.
TORCHAO_CHUNK = 1024**2


def nf4_load_bytes(numel: float, *, library: str) -> float:
    """Bytes live beside the model's weights while one weight of ``numel`` elements is quantized to
    4 bits at load (its packed result is counted with the weights).

    - ``torchao-0.1`` (torchtune 0.1 pins ``torchao==0.1``): torchtune creates each frozen base as a
      bf16 ``nn.Linear`` on the GPU and quantizes it there with ``to_nf4`` (torchtune v0.1.0,
      ``torchtune/modules/peft/lora.py``, ``LoRALinear._create_weight_and_bias``), and again in
      ``load_state_dict``, whose NF4 ``copy_`` moves the checkpoint's weight to the GPU first
      (``torchtune/utils/_register_nf4_dispatch_ops.py``, ``inplace_copy``). torchao v0.1's
      ``NF4Tensor.convert_to_norm_float_weight`` (``torchao/dtypes/nf4tensor.py``) holds the weight
      (2 B), its block-scaled copy (2 B) and, in ``quantize_tensor_nearest`` over the whole weight,
      ``(value.unsqueeze(-1) - nf4)``: 16 bf16 distances a weight (32 B), live with its ``.abs()``
      (32 B): 68 B a weight.
    - ``torchao`` (0.2 on, pytorch/ao#196 "perform in chunks"): the same per ``TORCHAO_CHUNK`` weights
      into a uint8 buffer: the weight, its scaled copy and the codes (5 B a weight) with one chunk's two
      distance buffers; the codes' packing then holds half a byte more.
    - ``bitsandbytes`` (transformers' ``load_in_4bit``: ``Params4bit._quantize``): the half-precision
      weight on the GPU while ``quantize_4bit`` packs it (2 B).
    """
    if library == "torchao-0.1":
        return 68.0 * numel
    if library == "torchao":
        return max(5.0 * numel + 64.0 * min(numel, TORCHAO_CHUNK), 5.5 * numel)
    if library == "bitsandbytes":
        return 2.0 * numel
    raise ValueError(f"not a 4-bit library: {library}")


def optimizer_state_bytes(optimizer: str, state_dtype_bytes: float, *, momentum: float = 0.9) -> float:
    """Optimizer state per trainable parameter (not counting an fp32 master copy).

    AdamW/Adam: two moments (exp_avg, exp_avg_sq) in the state dtype — 8 B in fp32 (ZeRO sec. 3.1),
    4 B when torch keeps them in the bf16 parameter dtype. 8-bit AdamW: two 1-byte block-wise
    quantized states (arXiv:2110.02861), 2 B plus one fp32 absmax per 2048-element block. Lion:
    one moment. SGD: one momentum buffer, none with momentum = 0. Adafactor is shape-dependent:
    see ``adafactor_state_bytes``.
    """
    if optimizer in ("adamw", "adam"):
        return 2 * state_dtype_bytes
    if optimizer == "adamw_8bit":
        return 2.0 + 2 * 4.0 / 2048
    if optimizer == "lion":
        return state_dtype_bytes
    if optimizer == "sgd":
        return state_dtype_bytes if momentum else 0.0
    raise ValueError(f"per-parameter state of {optimizer} depends on shapes")


def adafactor_state_bytes(matrices: Iterable[tuple[int, int]], vectors: float = 0) -> float:
    """Adafactor without first moment (HF/T5 default ``beta1=None``): a row and a column
    second-moment accumulator per weight matrix, 4 B each -> 4 * (rows + cols); full second moment
    for vectors (Shazeer & Stern 2018, sec. 3 and Alg. 4)."""
    return sum(4.0 * (rows + cols) for rows, cols in matrices) + 4.0 * vectors


def optimizer_step_temp_bytes(optimizer: str, trainable_params: float, state_dtype_bytes: float,
                              largest_matrix: float = 0.0, *, impl: str = "foreach") -> float:
    """Temporaries of one optimizer step, on top of parameters, gradients and states.

    torch AdamW/Adam (``foreach``, the CUDA default since PyTorch 2.0): ``_foreach_sqrt(exp_avg_sqs)``
    materialises one state-sized tensor list for all parameters at once -> 1 x state bytes per
    parameter; the for-loop (``_single_tensor_adamw``, before 2.0) one ``denom`` at a time.
    Lion (foreach): one update-sized temporary. Adafactor (HF): the update ``grad**2 + eps`` for one
    parameter at a time, fp32 -> 2 x the largest matrix x 4 B. SGD and 8-bit AdamW update in place.
    """
    if optimizer in ("adamw", "adam", "lion"):
        if impl == "forloop":
            return min(trainable_params, largest_matrix) * state_dtype_bytes
        return trainable_params * state_dtype_bytes
    if optimizer == "adafactor":
        return 2 * 4.0 * largest_matrix
    return 0.0


def lora_params(matrices: Iterable[tuple[int, int]], rank: int) -> int:
    """Trainable LoRA parameters: A (r x in) + B (out x r) per targeted matrix = r * (in + out)
    (Hu et al. 2021, sec. 4.1). Llama-2-7B, r=8 on q and v: 32 * 2 * 8 * (4096 + 4096) = 4,194,304."""
    return sum(rank * (i + o) for i, o in matrices)


def amp_cast_bytes(matmul_params: float) -> float:
    """torch.autocast keeps a half-precision copy of every fp32 weight used by a matmul: cached for
    the autocast region (leaf weights that require grad) and saved for the backward pass
    (PyTorch AMP docs, ``cache_enabled``). 2 B per matmul weight during forward/backward."""
    return 2.0 * matmul_params


def zero_shard(total_bytes: float, world_size: int) -> float:
    """ZeRO partitions a model state evenly over the data-parallel ranks (ZeRO sec. 5):
    stage 1 the optimizer states, stage 2 also the gradients, stage 3 also the parameters.
    FSDP FULL_SHARD is stage 3 (PyTorch FSDP docs)."""
    return total_bytes / max(1, world_size)


def gathered_working_set_bytes(largest_unit_params: float, compute_bytes: float, prefetch: int = 2) -> float:
    """ZeRO-3/FSDP all-gather the parameters of the unit being computed (one transformer block, or
    the embedding/LM head) and prefetch the next: ~``prefetch`` unsharded units in the compute
    dtype (FSDP docs: ``forward_prefetch``/``backward_prefetch``; DeepSpeed's
    ``stage3_max_live_parameters``)."""
    return prefetch * largest_unit_params * compute_bytes


# DeepSpeed's reduce_bucket_size default: gradients reduced (and, offloaded, copied out) per bucket.
REDUCE_BUCKET_SIZE = 5e8


def zero12_bucket_bytes(grad_bytes: float, *, bucket: float = REDUCE_BUCKET_SIZE, buffers: int = 1,
                        contiguous: bool = True, gradients: float = float("inf")) -> float:
    """DeepSpeed ZeRO-1/2's reduce bucket: with ``contiguous_gradients`` ``setup_buckets``
    (``deepspeed/runtime/zero/stage_1_and_2.py``) allocates ``torch.empty(reduce_bucket_size)`` of the
    gradient dtype at the first gradient of each backward, whatever the model's size, ``buffers`` of
    them (two with ``overlap_comm``); ``_release_ipg_buffers`` frees them when the backward ends.
    Without it ``buffered_reduce_fallback`` flattens the bucket's gradients, no more than there are
    (``gradients`` elements)."""
    return (bucket if contiguous else min(bucket, gradients)) * grad_bytes * buffers


def zero12_step_gradient_bytes(stage: int, trainable: float, world: int, grad_bytes: float,
                               step_temp: float, bucket_bytes: float | None = None) -> tuple[float, float]:
    """(gradients, workspace) at the peak of DeepSpeed ZeRO-1/2's ``step``, per rank.

    ``DeepSpeedZeroOptimizer.step`` flattens the rank's share of the gradients
    (``flatten(averaged_gradients)``, a copy beside the share) and casts it to fp32
    (``single_grad_partition``) before the half copies go: 2 + 2 + 4 B per parameter of the share
    (half gradients). The optimizer then steps with the fp32 share and its own temporaries
    (``step_temp``, of the share). At stage 1 the gradients are whole until the accumulation boundary,
    where they are reduced through the bucket (``bucket_bytes``, DeepSpeed's default one unless given)
    into the share: the whole gradients, the bucket and the share at once."""
    share = trainable / max(1, world)
    flatten = share * (2 * grad_bytes + 4.0)
    gradients = flatten
    if stage == 1:
        bucket = zero12_bucket_bytes(grad_bytes) if bucket_bytes is None else bucket_bytes
        gradients = max(flatten, trainable * grad_bytes + bucket + share * grad_bytes)
    return gradients, max(0.0, share * 4.0 + step_temp - gradients)


def zero3_gradient_buffer_bytes(trainable: float, largest_param: float, world: int, grad_bytes: float, *,
                                offload_optimizer: bool, bucket: float = REDUCE_BUCKET_SIZE) -> float:
    """DeepSpeed ZeRO-3's gradient path on the GPU (``deepspeed/runtime/zero/stage3.py``): the reduce
    bucket allocated at start-up (``torch.empty(reduce_bucket_size)``, whatever the model's size, held
    for good); while it is reduced, ``reduce_scatter_coalesced``'s flattened copy of what it holds
    (``torch.cat``); with ``offload_optimizer``, ``partition_grads`` brings each parameter's share of
    the gradient back to the GPU (``grad_buffer.to(device)``) and ``_offload_grad_partition_at_boundary``
    casts it to fp32 there before the host copy: 2 + 4 B of the largest parameter's share."""
    reduce = min(bucket, trainable) * grad_bytes
    offload = (grad_bytes + 4.0) * largest_param / max(1, world) if offload_optimizer else 0.0
    return bucket * grad_bytes + reduce + offload


def ddp_bucket_bytes(gradient_bytes_total: float) -> float:
    """DDP's reducer copies gradients into communication buckets that together hold every
    gradient (PyTorch DDP docs: ``gradient_as_bucket_view=True`` saves "the total gradients
    size"); the default keeps the copy."""
    return gradient_bytes_total


# --- activations ------------------------------------------------------------------------------------

def korthikanti_layer_bytes(s: int, b: int, h: int, a: int) -> float:
    """Closed form of Korthikanti et al. 2022, eq. (1): sbh(34 + 5as/h) bytes per transformer
    layer, fp16 activations, GELU MLP with ffn = 4h, dropout, no recomputation, eager attention."""
    return s * b * h * (34 + 5 * a * s / h)


def norm_saved_bytes(tokens: float, hidden: int, *, norm: str, act_bytes: float, residual_bytes: float,
                     weight_trainable: bool) -> float:
    """What one normalisation layer keeps for backward.

    LayerNorm (fused ATen kernel) saves its input — the residual stream, fp32 under autocast since
    ``layer_norm`` autocasts to fp32 and the residual add promotes — plus per-token mean/rstd.
    RMSNorm as written in HF/torchtune/LitGPT upcasts to fp32 first, so its saved input is an fp32
    copy (4 B), and the weight multiply also saves the normalised half tensor when the weight
    trains.
    """
    stats = tokens * 8.0
    if norm == "layernorm":
        return tokens * hidden * residual_bytes + stats
    saved = tokens * hidden * 4.0 + tokens * 4.0
    if weight_trainable:
        saved += tokens * hidden * act_bytes
    return saved


def attention_saved_bytes(*, tokens: float, batch: int, seq: int, hidden: int, heads: int, kv_heads: int,
                          act_bytes: float, attention: str, dropout: float, score_bytes: float,
                          amp_cast: bool) -> tuple[float, float]:
    """Tensors saved by the attention core: (sbh terms, a*s^2 terms), bytes.

    Eager (Korthikanti sec. 4.1): Q and K for QK^T (HF ``repeat_kv`` materialises K/V at full width),
    the softmax output, the dropout mask (1 B) and dropout output, and V: 11sbh + 5as^2b in fp16.
    The softmax is fp32 under autocast (PyTorch AMP op list); the PV matmul saves the half copy it casts
    (2 B), not the fp32 dropout output: 4 + 1 + 2 B. SDPA/FlashAttention (Dao et al. 2022) stores no s x s matrix:
    Q, K, V at their own widths (GQA shrinks K/V by kv_heads/heads), the output and the fp32
    log-sum-exp per row.
    """
    kv_frac = kv_heads / heads
    if attention == "eager":
        sbh = tokens * hidden * act_bytes * 3  # Q, K and V (K/V repeated to all heads)
        kept = 2.0 if amp_cast else (score_bytes if dropout > 0 else 0.0)  # what the PV matmul saves
        per_score = score_bytes + (1.0 if dropout > 0 else 0.0) + kept  # beside the softmax output and the mask
        return sbh, batch * heads * float(seq) * seq * per_score
    sbh = tokens * hidden * act_bytes * (2 + 2 * kv_frac) + tokens * heads * 4.0
    return sbh, 0.0


def mlp_saved_bytes(tokens: float, hidden: int, ffn: int, *, gated: bool, act_bytes: float,
                    down_input_saved: bool) -> float:
    """The MLP's saved tensors beyond its input (counted with the linear inputs).

    GELU MLP (Korthikanti sec. 4.1): the activation's input (its backward needs it) and, for the
    second linear's weight gradient, its output: 2 x s*b*ffn. SwiGLU (``down(silu(gate(x)) *
    up(x))``): SiLU's input, and both factors of the product, plus the product for ``down``'s
    weight gradient: 4 x s*b*ffn. A frozen ``down`` (LoRA) does not keep its input: autograd
    saves a matmul operand only for the gradient that is needed.
    """
    per = tokens * ffn * act_bytes
    if gated:
        return per * (3 + (1 if down_input_saved else 0))
    return per * (1 + (1 if down_input_saved else 0))


# Activations transformers composes from tensor operations, each of whose intermediates autograd keeps.
COMPOSED_TANH_GELU = frozenset({"gelu_new"})


def composed_gelu_saved_bytes(tokens: float, ffn: int, *, act_bytes: float, widened: bool) -> float:
    """What transformers' ``gelu_new`` (NewGELUActivation: ``0.5 * x * (1 + tanh(c * (x + 0.044715 *
    x**3))))``, the GPT-2, Phi and GPT-J default) keeps beyond a fused GELU's input and output: tanh's
    output, ``1 + tanh`` and ``0.5 * x``. Under autocast (whose float32 list holds ``pow``) and in fp32
    training the first two are float32 (``widened``); ``0.5 * x`` is in the compute dtype. Measured on an
    H100 (bench/gpu): GPT-2 small at 8 x 1024 under bf16 autocast kept 2.8 GiB more than a fused GELU.
    """
    return tokens * ffn * (2 * (4.0 if widened else act_bytes) + act_bytes)


def dropout_mask_bytes(tokens: float, width: int) -> float:
    """A dropout mask is 1 byte per element (Korthikanti sec. 4.1)."""
    return tokens * width * 1.0


def checkpointed_bytes(layers: int, tokens: float, hidden: int, input_bytes: float) -> float:
    """Full activation checkpointing keeps only each layer's input, 2sbh per layer in fp16
    (Korthikanti sec. 4.2, "full activation recomputation"); the residual stream is fp32 under
    autocast. One layer's full activations come back during its recomputation (added by the
    caller)."""
    return layers * tokens * hidden * input_bytes


def logits_bytes(tokens: float, vocab: int, *, logits_dtype_bytes: float, loss: str, upcast: bool,
                 chunks: int = 8) -> float:
    """The LM head output and the cross-entropy working set at its peak. Hugging Face causal-LM loss
    (``ForCausalLMLoss``), torchtune and torchtitan upcast the logits to fp32 before ``F.cross_entropy``:
    the logits in the compute dtype (held by the model output) plus three fp32 b*s*V buffers at the loss's
    peak (the upcast copy / log-softmax output, its gradient, the gradient of the input). fp32 training: 4
    fp32 buffers (16 B a logit). No upcast: four buffers in the logits dtype. Chunked loss (torchtune's
    ``CEWithChunkedOutputLoss``): the fp32 buffers for one chunk at a time. Classification heads: nothing
    vocabulary-sized. ``fp32_logits``: the model returns its logits upcast (torchtune's
    ``self.output(h).float()``) to torch's ``CrossEntropyLoss``: the fp32 copy is what its output holds,
    beside the loss's three (torchtune 0.1's recipe slices it with ``logits[..., :-1, :].contiguous()``, a
    copy that replaces it): the caller passes 4-byte logits, 16 B a logit. ``fp32_chunks`` (LitGPT's:
    ``defaults.FRAMEWORK_LOSS``), any precision: the fp32 chunks the loop holds and each chunk's fp32
    log-softmax saved for backward, 8 B a logit (backward frees a log-softmax as it makes its gradient)."""
    n = tokens * vocab
    if loss in ("classification", "fp32_chunks"):
        return n * (8.0 if loss == "fp32_chunks" else 0.0)
    if logits_dtype_bytes >= 4:
        return n * 16.0 if loss != "chunked" else n * (4.0 + 12.0 / chunks)
    if loss == "chunked":
        return n * (logits_dtype_bytes + 12.0 / chunks)
    if upcast:
        return n * (logits_dtype_bytes + 12.0)
    return n * logits_dtype_bytes * 4


# --- outside max_memory_allocated ---------------------------------------------------------------------

def cuda_context_bytes(*, lazy: bool = True) -> int:
    """The CUDA context and loaded kernels: ~300-500 MiB with lazy module loading (CUDA >= 11.7,
    ``CUDA_MODULE_LOADING=LAZY``, PyTorch CUDA semantics docs); 1-1.5 GiB (1.25 taken) where every kernel
    loads with the context (PyTorch before 1.13). Counted by nvidia-smi, never by max_memory_allocated."""
    return 500 * MIB if lazy else 1280 * MIB


def allocator_slack_bytes(peak_allocated: float, resident: float, *, expandable_segments: bool) -> float:
    """What the caching allocator reserves beyond ``peak_allocated``: ~10% (a few percent with
    ``expandable_segments:True``, which grows one segment in place) of what is freed and requested
    again (activations, gradients freed by ``zero_grad``, loss buffers, the step's temporaries), none
    of ``resident`` (weights, optimizer states, master copies: allocated once and kept).

    PyTorch's CUDA caching allocator (CUDA semantics, "Memory management") rounds a request over
    1 MiB to 512 bytes and carves it from a segment: 20 MiB segments for 1-10 MiB, a segment of its
    own rounded to 2 MiB above. A tensor never freed fills its segment (at most 2 MiB lost each):
    right after a model's init the pool is its allocated bytes within a fraction of a percent. The
    waste is where blocks are freed and re-requested at other sizes: a freed block is split for a
    smaller request and its rest cannot serve a larger one (``max_split_size_mb`` bounds splitting),
    and a segment stays cached while any of it is used, so the pool keeps the high-water mark of
    every pattern of transient sizes."""
    return max(0.0, peak_allocated - resident) * _slack_fraction(expandable_segments)


def allocated_from_reserved(reserved: float, resident: float, *, expandable_segments: bool) -> float:
    """The peak allocated whose peak + ``allocator_slack_bytes`` is ``reserved``: its exact inverse
    (a measured pool, the CUDA context taken off, back to the allocator's peak)."""
    fraction = _slack_fraction(expandable_segments)
    return reserved if reserved <= resident else (reserved + fraction * resident) / (1.0 + fraction)


def _slack_fraction(expandable_segments: bool) -> float:
    return 0.04 if expandable_segments else 0.10
