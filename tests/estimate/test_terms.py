"""Each term against its closed form from the cited source."""

from __future__ import annotations

import pytest

from gpudoc.estimate import terms
from gpudoc.estimate.inputs import ModelShape, TrainSetup, layer_matrix_shapes
from gpudoc.estimate.model import layer_activation_bytes


def test_adamw_fp32_is_16_bytes_per_param_so_7b_needs_112_gb_static():
    per_param = (terms.param_bytes("fp32", False) + terms.gradient_bytes("fp32", False)
                 + terms.optimizer_state_bytes("adamw", 4.0) + terms.master_weight_bytes("fp32", False))
    assert per_param == 16
    assert per_param * 7e9 == 112e9


def test_zero_mixed_precision_is_2_2_12_and_autocast_keeps_fp32_params():
    # ZeRO sec. 3.1: fp16 params 2, fp16 grads 2, fp32 master + Adam moments K = 12.
    assert terms.param_bytes("bf16", True) == 2
    assert terms.gradient_bytes("bf16", True) == 2
    assert terms.master_weight_bytes("bf16", True) + terms.optimizer_state_bytes("adamw", 4.0) == 12
    # torch.autocast: the parameters are fp32 and there is no separate master copy.
    assert terms.param_bytes("bf16", False) == 4
    assert terms.master_weight_bytes("bf16", False) == 0
    assert terms.uses_autocast("fp16", False) and not terms.uses_autocast("fp16", True)
    # bf16-true: bf16 params and moments, no master.
    assert terms.param_bytes("bf16-true", False) == 2
    assert terms.master_weight_bytes("bf16-true", False) == 0


@pytest.mark.parametrize("optimizer, expected", [("adamw", 8.0), ("adam", 8.0), ("lion", 4.0), ("sgd", 4.0)])
def test_optimizer_states_fp32(optimizer, expected):
    assert terms.optimizer_state_bytes(optimizer, 4.0) == expected


def test_sgd_without_momentum_and_8bit_adam():
    assert terms.optimizer_state_bytes("sgd", 4.0, momentum=0.0) == 0
    assert terms.optimizer_state_bytes("adamw_8bit", 4.0) == pytest.approx(2.0, abs=0.01)
    assert terms.optimizer_state_bytes("adamw", 2.0) == 4.0  # moments follow a bf16 param dtype


def test_adafactor_factors_a_matrix_into_rows_plus_columns():
    assert terms.adafactor_state_bytes([(4096, 11008)]) == 4 * (4096 + 11008)
    assert terms.adafactor_state_bytes([(10, 20)], vectors=5) == 4 * 30 + 20


def test_lora_llama2_7b_rank8_q_v_is_4194304():
    shape = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, params=6.74e9)
    mats = layer_matrix_shapes(shape)
    assert 32 * terms.lora_params([mats["q"], mats["v"]], 8) == 4_194_304


def test_lora_gqa_targets_use_the_kv_width():
    shape = ModelShape(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, params=8e9)
    mats = layer_matrix_shapes(shape)
    assert terms.lora_params([mats["k"]], 8) == 8 * (4096 + 1024)


def test_nf4_with_double_quantization_is_about_half_a_byte():
    # QLoRA sec. 3: 4 bits + 0.127 bits of constants per parameter.
    assert terms.quantized_weight_bytes("nf4") == pytest.approx((4 + 0.127) / 8)
    assert terms.quantized_weight_bytes("int8", 4096) == pytest.approx(1.0, abs=0.01)


def test_korthikanti_closed_form_gpt3_layer():
    # s=2048, b=1, h=12288, a=96 (GPT-3 175B): sbh(34 + 5as/h)
    s, b, h, a = 2048, 1, 12288, 96
    assert terms.korthikanti_layer_bytes(s, b, h, a) == s * b * h * 34 + 5 * a * s * s * b


def test_per_term_layer_matches_korthikanti_for_its_assumptions():
    """fp16 activations, GELU MLP with ffn = 4h, dropout, eager attention, full fine-tune: the
    per-term sum equals 34sbh + 5as^2b up to LayerNorm statistics and the attention-output copy.

    Differences by construction: fp16 softmax here follows pure-half training (2 B), LayerNorm
    keeps per-token mean/rstd (8 B/token), and the attention output is copied for the output
    projection (eager) which Korthikanti counts as the projection input (2sbh) — same total.
    """
    s, b, h, a = 1024, 2, 1024, 16
    shape = ModelShape(layers=1, hidden=h, heads=a, kv_heads=a, ffn=4 * h, vocab=1, params=1,
                       gated_mlp=False, norm="layernorm")
    setup = TrainSetup(micro_batch_size=b, seq_len=s, precision="fp16-true", attention="eager", dropout=0.1)
    total, scores, _ = layer_activation_bytes(shape, setup, tokens=s * b, batch=b)
    expected = terms.korthikanti_layer_bytes(s, b, h, a)
    stats = 2 * 8 * s * b
    assert scores == 5 * a * s * s * b
    assert total - stats == expected


def test_flash_attention_removes_the_quadratic_term_and_gqa_shrinks_kv():
    s, b, h, a = 4096, 1, 4096, 32
    common = {"tokens": s * b, "batch": b, "seq": s, "hidden": h, "heads": a, "act_bytes": 2.0, "dropout": 0.0,
                  "score_bytes": 2.0, "amp_cast": False}
    _, s2 = terms.attention_saved_bytes(kv_heads=a, attention="sdpa", **common)
    assert s2 == 0
    mha, _ = terms.attention_saved_bytes(kv_heads=a, attention="sdpa", **common)
    gqa, _ = terms.attention_saved_bytes(kv_heads=8, attention="sdpa", **common)
    assert mha - gqa == 2 * s * b * h * 2 * (1 - 8 / 32)
    _eager_sbh, eager_s2 = terms.attention_saved_bytes(kv_heads=a, attention="eager", **common)
    assert eager_s2 == 2 * a * s * s * b


def test_swiglu_saves_four_ffn_tensors_gelu_two():
    n, h, f = 1000, 64, 172
    assert terms.mlp_saved_bytes(n, h, f, gated=True, act_bytes=2, down_input_saved=True) == 4 * n * f * 2
    assert terms.mlp_saved_bytes(n, h, f, gated=False, act_bytes=2, down_input_saved=True) == 2 * n * f * 2
    # A frozen down projection does not keep its input.
    assert terms.mlp_saved_bytes(n, h, f, gated=True, act_bytes=2, down_input_saved=False) == 3 * n * f * 2


def test_full_checkpointing_keeps_2sbh_per_layer_in_half():
    assert terms.checkpointed_bytes(32, 2048 * 4, 4096, 2.0) == 32 * 2 * 2048 * 4 * 4096


def test_logits_llama3_vocab_dominates_at_long_context():
    tokens, vocab = 8192, 128256
    upcast = terms.logits_bytes(tokens, vocab, logits_dtype_bytes=2, loss="lm", upcast=True)
    assert upcast == tokens * vocab * 14  # bf16 logits + three fp32 buffers
    assert terms.logits_bytes(tokens, vocab, logits_dtype_bytes=4, loss="lm", upcast=True) == tokens * vocab * 16
    chunked = terms.logits_bytes(tokens, vocab, logits_dtype_bytes=2, loss="chunked", upcast=True)
    assert chunked == tokens * vocab * (2 + 12 / 8)
    assert terms.logits_bytes(tokens, vocab, logits_dtype_bytes=2, loss="classification", upcast=True) == 0
    assert terms.logits_bytes(tokens, vocab, logits_dtype_bytes=2, loss="lm", upcast=False) == tokens * vocab * 8
    # LitGPT's: the head in chunks handed back in fp32 and held by the loop, each chunk's fp32 log-softmax
    # saved; in any precision, whatever dtype the head computes in.
    for dtype_bytes in (2, 4):
        assert terms.logits_bytes(tokens, vocab, logits_dtype_bytes=dtype_bytes, loss="fp32_chunks",
                                  upcast=True) == tokens * vocab * 8


def test_zero_shards_evenly_and_working_set_is_two_units():
    assert terms.zero_shard(16e9, 8) == 2e9
    assert terms.gathered_working_set_bytes(200e6, 2.0) == 800e6


def test_deepspeed_buffers_follow_stage_1_and_2_and_stage3():
    # The reduce bucket is allocated whole (5e8 elements), two with overlap_comm; without
    # contiguous_gradients the flattened copy holds no more than the gradients.
    assert terms.zero12_bucket_bytes(2.0) == 1e9
    assert terms.zero12_bucket_bytes(2.0, buffers=2) == 2e9
    assert terms.zero12_bucket_bytes(2.0, bucket=2e8, gradients=1e8) == 4e8
    assert terms.zero12_bucket_bytes(2.0, bucket=2e8, contiguous=False, gradients=1e8) == 2e8
    # Stage 2 step, 8e9 parameters over 8 ranks: the bf16 share, its flattened copy and the fp32 cast;
    # the optimizer's temporaries come after the half copies are gone.
    assert terms.zero12_step_gradient_bytes(2, 8e9, 8, 2.0, step_temp=0.0) == (8e9, 0.0)
    assert terms.zero12_step_gradient_bytes(2, 8e9, 8, 2.0, step_temp=8e9) == (8e9, 4e9)
    # Stage 1: the whole gradients, the bucket and the share at the boundary's reduce.
    assert terms.zero12_step_gradient_bytes(1, 8e9, 8, 2.0, step_temp=0.0)[0] == 16e9 + 1e9 + 2e9
    assert terms.zero12_step_gradient_bytes(1, 8e9, 8, 2.0, step_temp=0.0, bucket_bytes=8e8)[0] == 16e9 + 8e8 + 2e9
    # ZeRO-3: the bucket, the reduce's copy (never more than the gradients), offloaded the largest
    # share brought back and cast to fp32.
    assert terms.zero3_gradient_buffer_bytes(124e6, 38e6, 1, 2.0, offload_optimizer=False) == 1e9 + 248e6
    assert terms.zero3_gradient_buffer_bytes(8e9, 1e9, 4, 2.0, offload_optimizer=True) == 1e9 + 1e9 + 6e9 / 4


def test_context_and_slack_are_outside_the_peak():
    assert 300 * 1024**2 <= terms.cuda_context_bytes() <= 500 * 1024**2
    assert terms.allocator_slack_bytes(10e9, 0.0, expandable_segments=False) > \
        terms.allocator_slack_bytes(10e9, 0.0, expandable_segments=True) > 0


def test_the_allocator_slack_is_on_what_is_freed_and_requested_again_not_on_what_is_kept():
    # A LoRA job: 14 GB of weights allocated once fill their segments; 1 GB of activations churn.
    kept, peak = 14e9, 15e9
    assert terms.allocator_slack_bytes(peak, kept, expandable_segments=False) == pytest.approx(0.10e9)
    assert terms.allocator_slack_bytes(peak, kept, expandable_segments=True) == pytest.approx(0.04e9)
    # Right after init (nothing transient yet) the pool is the weights; never a negative slack.
    assert terms.allocator_slack_bytes(kept, kept, expandable_segments=False) == 0.0
    assert terms.allocator_slack_bytes(1e9, kept, expandable_segments=False) == 0.0


@pytest.mark.parametrize("expandable", [False, True])
@pytest.mark.parametrize("peak", [0.5e9, 14e9, 15e9, 40e9])
def test_a_measured_pool_goes_back_to_exactly_the_peak_that_reserves_it(peak, expandable):
    kept = 14e9
    reserved = peak + terms.allocator_slack_bytes(peak, kept, expandable_segments=expandable)
    assert terms.allocated_from_reserved(reserved, kept, expandable_segments=expandable) == pytest.approx(peak)


def test_optimizer_step_temporaries():
    assert terms.optimizer_step_temp_bytes("adamw", 1e9, 4.0) == 4e9
    assert terms.optimizer_step_temp_bytes("adamw_8bit", 1e9, 4.0) == 0
    assert terms.optimizer_step_temp_bytes("adafactor", 1e9, 4.0, largest_matrix=1e6) == 8e6
