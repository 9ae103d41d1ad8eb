"""The composed model: activation terms against what autograd really saves (real torch, CPU), and
the phase/sharding logic against the physics it encodes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup
from gpudoc.estimate.model import compute_phases, layer_activation_bytes


def saved_bytes(module: nn.Module, *inputs: object, **named: object) -> int:
    """Bytes of the distinct storages autograd saves for backward in ``module(*inputs, **named)``,
    parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(*inputs, **named)
    return sum(seen.values())


class RMSNorm(nn.Module):
    """As Hugging Face / torchtune / LitGPT write it: upcast to fp32 first."""

    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * x.to(dtype)


class LlamaBlock(nn.Module):
    """A Llama block; ``hd``: a head size of its own (Gemma, Qwen3), the queries then heads x hd wide."""

    def __init__(self, h, a, kv, f, hd=None):
        super().__init__()
        self.a, self.kv = a, kv
        self.hd = hd = hd or h // a
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q, self.o = nn.Linear(h, a * hd, bias=False), nn.Linear(a * hd, h, bias=False)
        self.k, self.v = nn.Linear(h, kv * hd, bias=False), nn.Linear(h, kv * hd, bias=False)
        self.gate, self.up = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.down = nn.Linear(f, h, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        hd = self.hd
        y = self.n1(x)
        q = self.q(y).view(b, t, self.a, hd).transpose(1, 2)
        k = self.k(y).view(b, t, self.kv, hd).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv, hd).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(out.transpose(1, 2).contiguous().view(b, t, self.a * hd))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class GPTBlock(nn.Module):
    """GPT-2-style block with eager attention and no dropout (CPU dropout masks are float, not
    the 1-byte masks CUDA keeps, so dropout is compared by formula only)."""

    def __init__(self, h, a, f):
        super().__init__()
        self.a = a
        self.n1, self.n2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.o = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.proj = nn.Linear(h, f), nn.Linear(f, h)

    def forward(self, x):
        b, t, h = x.shape
        hd = h // self.a
        q, k, v = self.qkv(self.n1(x)).split(h, -1)
        q, k, v = (z.view(b, t, self.a, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / hd**0.5
        att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, h)
        x = x + self.o(y)
        return x + self.proj(F.gelu(self.fc(self.n2(x))))


B, T = 2, 128
LLAMA = ModelShape(layers=1, hidden=256, heads=8, kv_heads=2, ffn=688, vocab=1, params=1, gated_mlp=True)
GPT = ModelShape(layers=1, hidden=256, heads=4, kv_heads=4, ffn=1024, vocab=1, params=1, gated_mlp=False,
                 norm="layernorm")


def _predict(shape, **setup):
    setup = TrainSetup(micro_batch_size=B, seq_len=T, **setup)
    return layer_activation_bytes(shape, setup, tokens=B * T, batch=B)[0]


def test_llama_block_full_finetune_bf16_matches_autograd():
    block = LlamaBlock(256, 8, 2, 688).to(torch.bfloat16)
    x = torch.randn(B, T, 256, dtype=torch.bfloat16, requires_grad=True)
    assert _predict(LLAMA, precision="bf16-true", attention="sdpa") == saved_bytes(block, x)


def test_a_head_size_of_its_own_widens_what_attention_saves():
    # Qwen3-0.6B's proportions: 16 heads of 128 over a hidden size of 1024, here 8 x 64 over 256.
    block = LlamaBlock(256, 8, 2, 688, hd=64).to(torch.bfloat16)
    x = torch.randn(B, T, 256, dtype=torch.bfloat16, requires_grad=True)
    wide = replace(LLAMA, attention_head_dim=64)
    assert _predict(wide, precision="bf16-true", attention="sdpa") == saved_bytes(block, x)
    assert _predict(wide, precision="bf16-true", attention="sdpa") > _predict(LLAMA, precision="bf16-true",
                                                                              attention="sdpa")


def test_llama_block_frozen_base_saves_only_what_backward_through_it_needs():
    block = LlamaBlock(256, 8, 2, 688).to(torch.bfloat16).requires_grad_(False)
    x = torch.randn(B, T, 256, dtype=torch.bfloat16, requires_grad=True)
    predicted = _predict(LLAMA, precision="bf16-true", attention="sdpa", lora_rank=8, lora_targets=())
    assert predicted == saved_bytes(block, x)


def test_gpt_block_fp32_eager_matches_autograd_up_to_the_causal_mask():
    block = GPTBlock(256, 4, 1024)
    x = torch.randn(B, T, 256, requires_grad=True)
    mask = T * T  # the bool causal mask, shared by all layers in real models
    assert _predict(GPT, precision="fp32", attention="eager") == saved_bytes(block, x) - mask


def _inputs(shape: ModelShape | None = None, **setup) -> Inputs:
    shape = shape or ModelShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                                params=8.03e9, gated_mlp=True)
    base = {"micro_batch_size": 1, "seq_len": 2048, "precision": "bf16"}
    base.update(setup)
    return Inputs(shape=shape, setup=TrainSetup(**base))


def test_checkpointing_lowers_activations_and_selective_sits_between():
    none = compute_phases(_inputs()).forward_backward["activations"]
    full = compute_phases(_inputs(gradient_checkpointing="full")).forward_backward["activations"]
    selective = compute_phases(_inputs(gradient_checkpointing="selective")).forward_backward["activations"]
    assert full < selective < none


def test_autocast_params_fp32_with_cast_copies_and_engine_bf16_with_master():
    amp = compute_phases(_inputs())
    assert amp.forward_backward["weights"] == pytest.approx(8.03e9 * 4)
    assert amp.forward_backward["workspace"] > 2 * 6.9e9  # bf16 casts of the matmul weights
    engine = compute_phases(_inputs(zero_stage=1, world_size=1, fsdp=True))
    assert engine.forward_backward["weights"] == pytest.approx(8.03e9 * 2)
    # master 4 + moments 8 per parameter, in the optimizer column
    assert engine.forward_backward["optimizer"] == pytest.approx(8.03e9 * 12)


def test_zero_stages_shard_optimizer_then_gradients_then_weights():
    def step(stage):
        return compute_phases(_inputs(zero_stage=stage, world_size=8, micro_batch_size=1)).optimizer_step

    s1, s2, s3 = step(1), step(2), step(3)
    share = 8.03e9 / 8
    assert s1["optimizer"] == pytest.approx(12 * share)  # fp32 master share + two fp32 moments of it
    assert s3["gradients"] == pytest.approx(2 * share)
    assert s3["weights"] == pytest.approx(s2["weights"] / 8)


def test_deepspeed_zero_1_2_step_flattens_the_share_to_fp32_and_backward_holds_the_bucket():
    """DeepSpeed's stage_1_and_2.py: the bf16 share, its flattened copy and the fp32 cast at the step;
    the reduce bucket (5e8 elements by default) from the first gradient of the backward on; stage 1
    reduces the whole gradients through the bucket at the boundary."""
    share = 8.03e9 / 8
    s2 = compute_phases(_inputs(zero_stage=2, world_size=8))
    assert s2.optimizer_step["gradients"] == pytest.approx(share * (2 + 2 + 4))
    assert s2.optimizer_step["optimizer"] == pytest.approx(12 * share)
    assert s2.forward_backward["workspace"] == pytest.approx(5e8 * 2)
    s1 = compute_phases(_inputs(zero_stage=1, world_size=8)).optimizer_step
    assert s1["gradients"] == pytest.approx(8.03e9 * 2 + 5e8 * 2 + share * 2)
    fsdp = compute_phases(_inputs(zero_stage=2, world_size=8, fsdp=True))
    assert fsdp.optimizer_step["gradients"] == pytest.approx(2 * share)  # FSDP reduces into its shard


def test_offload_moves_optimizer_states_off_the_gpu():
    on = compute_phases(_inputs(zero_stage=2, world_size=2))
    off = compute_phases(_inputs(zero_stage=2, world_size=2, offload_optimizer=True))
    assert off.optimizer_step["optimizer"] == 0 < on.optimizer_step["optimizer"]


def test_lora_trains_only_adapters_and_qlora_shrinks_the_base():
    lora = compute_phases(_inputs(precision="bf16-true", lora_rank=16))
    assert lora.optimizer_step["gradients"] < 0.01 * 8.03e9
    qlora = compute_phases(_inputs(precision="bf16-true", lora_rank=16, quantization="nf4"))
    assert qlora.forward_backward["weights"] < 0.4 * lora.forward_backward["weights"]


def test_gradient_accumulation_keeps_gradients_through_the_forward_pass():
    one = compute_phases(_inputs(precision="bf16-true"))
    accum = compute_phases(_inputs(precision="bf16-true", gradient_accumulation_steps=4))
    assert one.forward_backward["gradients"] == 0
    assert accum.forward_backward["gradients"] == pytest.approx(8.03e9 * 2)


def test_peak_is_the_max_over_phases():
    # No activations to speak of: the optimizer step (grads + foreach temporaries) is the peak.
    tiny = compute_phases(_inputs(precision="fp32", seq_len=8))
    assert tiny.peak_phase == "optimizer_step"
    long = compute_phases(_inputs(precision="fp32", seq_len=8192))
    assert long.peak_phase == "forward_backward"
    assert long.peak == max(long.fb_total, long.step_total)


def test_ddp_buckets_copy_the_gradients():
    single = compute_phases(_inputs(precision="bf16-true"))
    ddp = compute_phases(_inputs(precision="bf16-true", world_size=4))
    assert ddp.optimizer_step["workspace"] - single.optimizer_step["workspace"] == pytest.approx(8.03e9 * 2)


def test_optimizer_in_backward_never_holds_all_gradients():
    # Short sequences: without the fusion the step (all gradients resident) is the peak.
    normal = compute_phases(_inputs(precision="bf16-true", optimizer="adamw_8bit", seq_len=64))
    fused = compute_phases(_inputs(precision="bf16-true", optimizer="adamw_8bit", seq_len=64,
                                   optimizer_in_backward=True))
    assert fused.peak < normal.peak
    assert fused.optimizer_step["gradients"] < 0.07 * normal.optimizer_step["gradients"]  # the head's alone


def test_optimizer_in_backward_holds_the_largest_gradient_that_trains():
    """torchtune's ``register_optim_in_bwd_hooks`` steps each parameter from its post-accumulate-grad hook
    and sets its gradient to None: a full fine-tune's largest gradient is the head's (or the embedding's),
    vocabulary x hidden, whole when its hook fires (a chunked output sums every chunk's part first)."""
    full = compute_phases(_inputs(precision="bf16-true", optimizer_in_backward=True))
    assert full.forward_backward["gradients"] == pytest.approx(2 * 128256 * 4096)  # not a block's 14336 x 4096
    lora = compute_phases(_inputs(precision="bf16-true", optimizer_in_backward=True, lora_rank=8,
                                  lora_targets=("q", "v")))
    assert lora.forward_backward["gradients"] < full.forward_backward["gradients"]  # the head is frozen


def test_fp32_activations_are_twice_half():
    half = _inputs(precision="bf16-true", attention="eager")
    full = replace(half, setup=replace(half.setup, precision="fp32"))
    a16 = compute_phases(half).forward_backward["activations"]
    a32 = compute_phases(full).forward_backward["activations"]
    assert 1.7 < a32 / a16 <= 2.0  # fp32 norm copies are the same size in both


def test_zero3_parameter_offload_on_one_gpu_holds_what_deepspeeds_trace_keeps():
    """DeepSpeed ZeRO-3 with offload_param, on one GPU as on many: no resident weights; gathered as
    backward starts, what the trace keeps for reuse within stage3_max_reuse_distance (the head; a
    Llama-3.1-8B block's reuse comes after two heads, 1.05e9 elements, past the default 1e9),
    stage3_prefetch_bucket_size and the head's partition copy while it is gathered; the gradients
    leave through the reduce bucket."""
    offload = compute_phases(_inputs(precision="bf16-true", zero_stage=3, world_size=1, offload_params=True,
                                     offload_optimizer=True))
    fb, step = offload.forward_backward, offload.optimizer_step
    assert fb["weights"] == step["weights"] == 0 and step["optimizer"] == 0
    head = 128256 * 4096
    assert step["gradients"] <= 5e8 * 2
    assert not any("counted as offloaded anyway" in n for n in offload.notes)
    assert any("from DeepSpeed's defaults" in n for n in offload.notes)
    # A longer reuse distance from the job's JSON keeps the last blocks too.
    kept = compute_phases(_inputs(precision="bf16-true", zero_stage=3, world_size=1, offload_params=True,
                                  offload_optimizer=True, zero_settings=(("stage3_max_reuse_distance", 4e9),)))
    blocks = (4e9 - 2 * head) // (2 * 218_112_000) + 1
    assert kept.forward_backward["workspace"] - fb["workspace"] == pytest.approx(blocks * 218_112_000 * 2 - 5e7 * 2,
                                                                                  rel=0.01)


def test_deepspeed_zero3_gradient_path_holds_its_bucket_and_offloaded_the_largest_shares_copies():
    """stage3.py: the reduce bucket for good, reduce_scatter_coalesced's flattened copy while it reduces,
    and with offload_optimizer the largest parameter's share brought back and cast to fp32 (2 + 4 B);
    the gradients' share itself is the host's."""
    shape = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, params=7.5e9,
                       gated_mlp=True)
    on_gpu = compute_phases(_inputs(shape, precision="bf16-true", zero_stage=3, world_size=8))
    offload = compute_phases(_inputs(shape, precision="bf16-true", zero_stage=3, world_size=8,
                                     offload_optimizer=True))
    embedding = 32000 * 4096
    # On the GPU, the optimizer's largest sub-group's fp32 gradient lives in the step only (the rank's
    # 7.5e9 / 8 elements: under sub_group_size, one sub-group; _release_sub_group drops it after);
    # offloaded, it is the host's.
    assert offload.forward_backward["workspace"] - on_gpu.forward_backward["workspace"] == \
        pytest.approx(6 * embedding / 8)
    assert on_gpu.optimizer_step["workspace"] == pytest.approx(5e8 * 2 + 4 * 7.5e9 / 8)
    small_groups = compute_phases(_inputs(shape, precision="bf16-true", zero_stage=3, world_size=8,
                                          zero_settings=(("sub_group_size", 1e8),)))
    assert on_gpu.optimizer_step["workspace"] - small_groups.optimizer_step["workspace"] == \
        pytest.approx(4 * (7.5e9 / 8 - 1e8))
    assert offload.optimizer_step["gradients"] == 0 < on_gpu.optimizer_step["gradients"]
    assert offload.optimizer_step["workspace"] == pytest.approx(5e8 * 2)
    # On one GPU the formula reads bf16 as fp32 parameters under autocast; DeepSpeed's bucket is bf16.
    one = compute_phases(_inputs(shape, precision="bf16", zero_stage=3, world_size=1, offload_params=True,
                                 offload_optimizer=True))
    assert one.optimizer_step["workspace"] == pytest.approx(5e8 * 2)
    fsdp = compute_phases(_inputs(shape, precision="bf16-true", zero_stage=3, world_size=8, fsdp=True))
    assert on_gpu.forward_backward["workspace"] - fsdp.forward_backward["workspace"] >= 5e8 * 2
    # FSDP gathers the unit it computes and the next: no more than DeepSpeed's budgets, less where its
    # trace keeps the last blocks for reuse.
    fsdp = compute_phases(_inputs(precision="bf16-true", fsdp=True, world_size=8, offload_params=True))
    deepspeed = compute_phases(_inputs(precision="bf16-true", zero_stage=3, world_size=8, offload_params=True))
    assert fsdp.forward_backward["workspace"] <= deepspeed.forward_backward["workspace"]
    far = compute_phases(_inputs(precision="bf16-true", zero_stage=3, world_size=8, offload_params=True,
                                 zero_settings=(("stage3_max_reuse_distance", 4e9),)))
    assert fsdp.forward_backward["workspace"] < far.forward_backward["workspace"] - 0.4e9 * 2


def test_qlora_under_autocast_keeps_the_unquantized_weights_and_the_logits_fp32():
    """peft's prepare_model_for_kbit_training upcasts embeddings, head and norms to fp32; pure bf16
    training (LitGPT, torchtune) does not."""
    pure = compute_phases(_inputs(precision="bf16-true", lora_rank=16, quantization="nf4",
                                  gradient_checkpointing="full")).forward_backward
    mixed = compute_phases(_inputs(precision="bf16", lora_rank=16, quantization="nf4",
                                   gradient_checkpointing="full")).forward_backward
    embeddings = 2 * 128256 * 4096  # Llama-3-8B's embedding and untied head
    assert mixed["weights"] - pure["weights"] == pytest.approx(embeddings * 2, rel=0.02)
    assert mixed["logits"] == pytest.approx(2048 * 128256 * 16)  # fp32 logits + three fp32 loss buffers
    assert pure["logits"] == pytest.approx(2048 * 128256 * 14)


def test_a_model_that_returns_fp32_logits_to_its_loss_holds_four_fp32_buffers():
    """torchtune's decoder ``.float()``s its logits for torch's CrossEntropyLoss (``loss = "fp32_logits"``):
    the fp32 copy instead of the bf16 one beside the loss's three fp32 buffers."""
    upcast = compute_phases(_inputs(precision="bf16-true")).forward_backward
    fp32 = compute_phases(_inputs(precision="bf16-true", loss="fp32_logits")).forward_backward
    assert upcast["logits"] == pytest.approx(2048 * 128256 * 14)
    assert fp32["logits"] == pytest.approx(2048 * 128256 * 16)


def test_an_encoder_decoder_with_short_targets_saves_decoder_tokens_only():
    t5 = ModelShape(layers=48, hidden=2048, heads=32, kv_heads=32, ffn=5120, vocab=32128, params=2.85e9,
                    arch="encoder-decoder", encoder_layers=24, decoder_layers=24, norm="rmsnorm")
    long = compute_phases(_inputs(shape=t5, precision="fp32", seq_len=512, attention="eager")).forward_backward
    short = compute_phases(_inputs(shape=t5, precision="fp32", seq_len=512, attention="eager",
                                   target_len=8)).forward_backward
    assert short["logits"] == pytest.approx(long["logits"] * 8 / 512)
    # The encoder's 24 blocks still see 512 tokens: a little over half of the activations remain.
    assert 0.4 * long["activations"] < short["activations"] < 0.65 * long["activations"]


def test_a_fused_lora_target_is_one_adapter_with_one_dropout():
    """GPT-2's c_attn (peft's default there) covers q, k and v with one adapter: one dropout mask and
    copy of the input and one A output per block, where q_proj, k_proj and v_proj keep three (peft's
    adapters are fp32: the dropout's output and A's are 4 bytes an element)."""
    shape = ModelShape(layers=1, hidden=768, heads=12, kv_heads=12, ffn=3072, vocab=50257, params=1e8,
                       gated_mlp=False, norm="layernorm")
    setup = TrainSetup(micro_batch_size=1, seq_len=1024, precision="bf16-true", lora_rank=8, lora_dropout=0.1,
                       lora_targets=("q", "k", "v"))
    separate = layer_activation_bytes(shape, setup, tokens=1024.0, batch=1)[0]
    fused = layer_activation_bytes(shape, replace(setup, lora_modules=(("q", "k", "v"),)), tokens=1024.0, batch=1)[0]
    assert separate - fused == 2 * (1024 * 768 * (1 + 4) + 1024 * 8 * 4)


_LLAMA_BLOCK = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, params=6.74e9,
                          gated_mlp=True, norm="rmsnorm")


def test_peft_keeps_its_adapters_in_fp32_under_pure_half_precision_and_a_frameworks_own_do_not():
    """peft upcasts bf16 adapters to fp32 (``autocast_adapter_dtype``): the adapters, their gradients and
    AdamW's two states are 4 + 4 + 8 bytes a parameter where torchtune's or LitGPT's bf16 ones are 2 + 2 + 4."""
    setup = TrainSetup(micro_batch_size=1, seq_len=512, precision="bf16-true", lora_rank=64,
                       lora_targets=("q", "k", "v", "o", "gate", "up", "down"))
    peft = compute_phases(Inputs(_LLAMA_BLOCK, setup)).optimizer_step
    own = compute_phases(Inputs(_LLAMA_BLOCK, replace(setup, lora_adapters="own"))).optimizer_step
    trainable = 32 * 64 * (4 * (4096 + 4096) + 3 * (4096 + 11008))
    assert peft["weights"] - own["weights"] == pytest.approx(trainable * (4 - 2))
    assert peft["gradients"] - own["gradients"] == pytest.approx(trainable * (4 - 2))
    assert peft["optimizer"] - own["optimizer"] == pytest.approx(trainable * ((8 + 4) - (4 + 2)))  # states, foreach temp


@pytest.mark.parametrize(("precision", "adapters", "dropout", "kept", "a_out"), [
    ("bf16-true", "peft", 0.0, 2 * 4, 4),  # peft's cast of the bf16 input to its fp32 adapters, one per adapter
    ("bf16-true", "peft", 0.1, 2 * (1 + 4), 4),  # the dropout's mask and its fp32 output, one per adapter
    ("bf16-true", "own", 0.0, 2, 2),  # torchtune's bf16 adapters take the input itself: kept once for both
    ("bf16-true", "own", 0.1, 2 * (1 + 2), 2),  # the frozen layer keeps nothing; each dropout its mask and output
    ("bf16", "peft", 0.0, 2 * 2, 2),  # under autocast: each adapter's half cast of the input
    ("fp32", "peft", 0.0, 4, 4),  # fp32 adapters on an fp32 input: the input itself, once
])
def test_what_the_lora_adapters_on_one_input_keep(precision, adapters, dropout, kept, a_out):
    """LoRA on q and v, which read one input, against no adapter on the block: what the two keep of
    that input (bytes an element of it) and their A outputs, per adapter library, precision and dropout."""
    base = TrainSetup(micro_batch_size=1, seq_len=512, precision=precision, lora_rank=8, lora_dropout=dropout,
                      lora_adapters=adapters)

    def block(*targets: str) -> float:
        return layer_activation_bytes(_LLAMA_BLOCK, replace(base, lora_targets=targets), tokens=512.0, batch=1)[0]

    assert block("q", "v") - block() == 512 * 4096 * kept + 2 * 512 * 8 * a_out
