"""Each CUDA emulation, measured on its own with the live-bytes tracker on real meta tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from gpudoc.estimate import terms  # noqa: E402
from gpudoc.simhelper.emulate import Emulation  # noqa: E402
from gpudoc.simhelper.tracker import LiveBytes, rounded  # noqa: E402

MIB = 1024**2


def _saved_by(fn, *inputs, emulation: Emulation) -> tuple[int, object]:
    """Bytes that stay live after ``fn(*inputs)`` (its output and what autograd saved)."""
    tracker = LiveBytes()
    with tracker, emulation.installed():
        for t in inputs:
            tracker.track(t)
        before = tracker.live
        emulation.forward_begins()
        out = fn(*inputs)
        emulation.forward_ends()
        kept = tracker.live - before
    return kept, out


def test_allocator_rounding_is_512_bytes():
    assert rounded(1) == 512 and rounded(512) == 512 and rounded(513) == 1024 and rounded(0) == 0
    tracker = LiveBytes()
    with tracker:
        x = torch.ones(1, device="meta")
        assert tracker.live == 512
        del x
        assert tracker.live == 0


def test_dropout_saves_a_one_byte_mask_like_cuda():
    x = torch.empty(1024, 1024, device="meta", requires_grad=True)
    cuda_like, _ = _saved_by(lambda t: F.dropout(t, 0.1), x, emulation=Emulation())
    meta, _ = _saved_by(lambda t: F.dropout(t, 0.1), x, emulation=Emulation(dropout=False))
    assert cuda_like == 4 * MIB + 1 * MIB  # the output + a bool mask
    assert meta > cuda_like  # meta/CPU keep a mask of the input's dtype


@pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="this torch has no grouped_mm")
def test_grouped_mm_runs_fp32_experts_on_meta_as_cuda_s_fallback_kernel_does():
    """Mixed precision keeps the experts in fp32: meta's grouped_mm refuses them, CUDA computes them."""
    tokens = torch.empty(4096, 256, device="meta", requires_grad=True)  # (tokens x experts chosen, hidden)
    experts = torch.empty(8, 256, 512, device="meta", requires_grad=True)
    offs = torch.empty(8, dtype=torch.int32, device="meta")
    with pytest.raises(RuntimeError, match="BF16"):
        _saved_by(lambda a, b: F.grouped_mm(a, b, offs=offs), tokens, experts, emulation=Emulation(grouped_mm=False))
    kept, out = _saved_by(lambda a, b: F.grouped_mm(a, b, offs=offs), tokens, experts, emulation=Emulation())
    assert out.shape == (4096, 512) and out.dtype == torch.float32
    assert kept == 4096 * 512 * 4  # the output; the inputs it saves for backward were already live
    tracker = LiveBytes()
    with tracker, Emulation().installed():
        out = F.grouped_mm(tokens, experts, offs=offs)
        out.sum().backward()
    assert tokens.grad.shape == tokens.shape and experts.grad.shape == experts.shape


def _qkv(dtype, heads=4, seq=1024):
    return [torch.empty(1, heads, seq, 64, device="meta", dtype=dtype, requires_grad=True) for _ in range(3)]


def test_sdpa_takes_flash_for_half_without_mask_instead_of_the_math_path():
    emulated = Emulation()
    flash, _ = _saved_by(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), *_qkv(torch.bfloat16),
                         emulation=emulated)
    math, _ = _saved_by(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), *_qkv(torch.bfloat16),
                        emulation=Emulation(attention=False))
    assert emulated.sdpa_kernels == {"flash": 1}
    assert flash < 2 * MIB  # output + logsumexp: no seq x seq scores
    assert math - flash >= 4 * 1024 * 1024 * 2  # the math path keeps heads x s x s scores


@pytest.mark.parametrize("dtype, masked", [(torch.float32, False), (torch.bfloat16, True)])
def test_sdpa_takes_memory_efficient_for_fp32_or_a_mask(dtype, masked):
    emulated = Emulation()
    q, k, v = _qkv(dtype)
    mask = torch.empty(1, 1, 1024, 1024, device="meta", dtype=dtype) if masked else None
    kept, out = _saved_by(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v,
                          emulation=emulated)
    assert emulated.sdpa_kernels == {"efficient": 1}
    assert out.shape == q.shape and kept < 4 * 1024 * 1024 * 2


def test_sdpa_expands_grouped_query_heads():
    emulated = Emulation()
    q = torch.empty(1, 8, 128, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    kv = [torch.empty(1, 2, 128, 64, device="meta", dtype=torch.bfloat16, requires_grad=True) for _ in range(2)]
    _, out = _saved_by(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, *kv,
                       emulation=emulated)
    assert out.shape == q.shape and emulated.sdpa_kernels == {"flash": 1}


def test_autocast_casts_matmuls_down_and_caches_a_weight_cast_once():
    linear = torch.nn.Linear(1024, 1024, bias=False, device="meta")
    x = torch.empty(8, 1024, device="meta")

    def twice(t, _weight):
        return linear(linear(t))  # the same weight twice: CUDA autocast casts it once per region

    kept, out = _saved_by(twice, x, linear.weight, emulation=Emulation(autocast_dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16
    # One bf16 weight cast (2 MiB, saved for backward) plus the small activations.
    assert 2 * MIB <= kept < 2 * MIB + 128 * 1024
    plain, out = _saved_by(twice, x, linear.weight, emulation=Emulation(autocast_dtype=None))
    assert out.dtype == torch.float32 and plain < 128 * 1024  # fp32 without autocast: no casts at all


def test_autocast_runs_softmax_in_fp32():
    x = torch.empty(4, 256, device="meta", dtype=torch.bfloat16)
    _, out = _saved_by(lambda t: F.softmax(t, dim=-1), x, emulation=Emulation(autocast_dtype=torch.bfloat16))
    assert out.dtype == torch.float32


def test_data_dependent_reads_answer_instead_of_failing_on_meta():
    tracker = LiveBytes()
    with tracker:
        x = torch.empty(4, device="meta")
        taken = bool((x > 0).all())
    assert taken is False and tracker.scalar_reads == 1
    with pytest.raises(RuntimeError):
        torch.empty(4, device="meta").sum().item()  # outside the tracker meta still refuses


def test_patches_are_removed_after_the_step():
    original = F.scaled_dot_product_attention, F.dropout, F.linear, torch.Tensor.__matmul__
    with Emulation(autocast_dtype=torch.float16).installed():
        assert F.dropout is not original[1]
    assert (F.scaled_dot_product_attention, F.dropout, F.linear, torch.Tensor.__matmul__) == original


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_eager_scores_under_autocast_are_what_cudas_autocast_policy_saves(dropout):
    """Eager attention under CUDA autocast (its cast policy as the simulation emulates it): the softmax
    output in fp32, the dropout mask, and the half copy the PV matmul casts and saves — never the fp32
    dropout output, which no backward reads."""
    b, a, s, d = 2, 4, 32, 16
    q, k, v = (torch.empty(b, a, s, d, dtype=torch.float16, device="meta", requires_grad=True) for _ in range(3))
    saved: dict[int, int] = {}

    def pack(tensor):
        if tensor.shape[-2:] == (s, s):
            saved[id(tensor.untyped_storage())] = tensor.untyped_storage().nbytes()
        return tensor

    emulation = Emulation(autocast_dtype=torch.float16)
    with emulation.installed(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        emulation.forward_begins()
        scores = torch.nn.functional.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)
        torch.matmul(torch.nn.functional.dropout(scores, p=dropout, training=True), v)
    _, s2 = terms.attention_saved_bytes(tokens=b * s, batch=b, seq=s, hidden=a * d, heads=a, kv_heads=a, act_bytes=2.0,
                                        attention="eager", dropout=dropout, score_bytes=4.0, amp_cast=True)
    assert s2 == sum(saved.values()) == b * a * s * s * (7 if dropout else 6)
