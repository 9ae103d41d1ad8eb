"""The stand-in for bitsandbytes' 4-bit linear layer, measured on its own with the live-bytes tracker
on real meta tensors: what it holds, what its forward keeps for backward, and its transients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpudoc.simhelper.kbit import Linear4bit, quantize_linears  # noqa: E402
from gpudoc.simhelper.tracker import LiveBytes, rounded  # noqa: E402

IN, OUT, TOKENS = 4096, 2048, 1024
MIB = 1024**2


def _layer() -> Linear4bit:
    with torch.device("meta"):
        return Linear4bit(torch.nn.Linear(IN, OUT, bias=False), torch.bfloat16)


def test_the_layer_holds_packed_codes_and_double_quantized_constants_not_a_float_weight():
    layer = _layer()
    held = {name: rounded(t.untyped_storage().nbytes()) for name, t in [*layer.named_parameters(),
                                                                        *layer.named_buffers()]}
    blocks = IN * OUT // 64
    assert held == {"weight": IN * OUT // 2, "absmax": blocks, "nested_absmax": rounded(4 * blocks // 256)}
    assert not layer.weight.requires_grad and layer.weight.dtype == torch.uint8


def test_forward_keeps_the_input_and_dequantizes_a_transient_weight_twice():
    layer = _layer()
    tracker = LiveBytes()
    with tracker:
        tracker.track(layer.weight)
        x = torch.empty(TOKENS, IN, dtype=torch.bfloat16, device="meta", requires_grad=True)
        tracker.track(x)
        start = tracker.live
        tracker.begin()
        tracker.stage = "forward"
        out = layer(x)
        forward = tracker.end()
        del x  # the caller's reference: MatMul4Bit's ctx.tensors still holds the input
        output, inputs = TOKENS * OUT * 2, TOKENS * IN * 2
        assert tracker.live - start == output
        # At the matmul: the input, the dequantized weight (out x in, bf16) and the output.
        assert forward.peak_bytes - start == IN * OUT * 2 + output
        tracker.begin()
        tracker.stage = "backward"
        out.sum().backward()
        backward = tracker.end()
    # Backward dequantizes again beside the input's gradient (and the loss's scalars); the packed
    # weight gets no gradient.
    rise = backward.peak_bytes - backward.start_bytes
    assert IN * OUT * 2 + inputs <= rise <= IN * OUT * 2 + inputs + 4 * 512
    assert layer.weight.grad is None


def test_an_fp32_input_is_cast_to_the_compute_dtype_and_the_output_back():
    layer = _layer()
    out = layer(torch.empty(8, IN, device="meta", requires_grad=True))
    assert out.dtype == torch.float32 and out.shape == (8, OUT)


def test_every_linear_but_the_output_head_is_converted():
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
            self.head = torch.nn.Linear(64, 100)

        def get_output_embeddings(self):
            return self.head

    with torch.device("meta"):
        model = Tiny()
    assert quantize_linears(model, torch.bfloat16) == 2
    assert isinstance(model.blocks[0], Linear4bit) and type(model.head) is torch.nn.Linear


def test_gpt2s_conv1d_layers_are_converted_as_linear_layers_of_their_transposed_shape():
    """transformers' bitsandbytes integration replaces GPT-2's Conv1D (weight stored in x out) as a
    linear layer; left in bf16 they would hold four times the packed bytes."""
    pytorch_utils = pytest.importorskip("transformers.pytorch_utils")
    with torch.device("meta"):
        model = torch.nn.Sequential(pytorch_utils.Conv1D(3 * 64, 64), torch.nn.Linear(3 * 64, 64))
    assert quantize_linears(model, torch.bfloat16) == 2
    fused = model[0]
    assert isinstance(fused, Linear4bit) and (fused.in_features, fused.out_features) == (64, 3 * 64)
    assert fused.weight.numel() == 64 * 3 * 64 // 2
    assert model(torch.empty(8, 64, device="meta", dtype=torch.bfloat16)).shape == (8, 64)


@pytest.mark.parametrize("checkpointed", [False, True])
def test_the_kept_input_is_dropped_by_gradient_checkpointing(checkpointed):
    """An fp32 input is cast to a bf16 copy the matmul keeps; inside a checkpointed region that copy
    is recomputed in backward instead (as under reentrant checkpointing, where no graph holds it)."""
    from torch.utils.checkpoint import checkpoint

    layer = _layer()
    tracker = LiveBytes()
    with tracker:
        tracker.track(layer.weight)
        x = torch.empty(TOKENS, IN, device="meta", requires_grad=True)
        tracker.track(x)
        start = tracker.live
        out = checkpoint(layer, x, use_reentrant=False) if checkpointed else layer(x)
        kept = tracker.live - start
    output, cast_input = TOKENS * OUT * 4, TOKENS * IN * 2
    assert kept == output + (0 if checkpointed else cast_input)
    del out


def test_torchaos_nf4_keeps_no_input_and_dequantizes_through_int64_codes_in_forward_and_backward():
    """torchtune's QLoRA layer (torchao's ``LinearNF4``): the same packed bytes as bitsandbytes', but
    only the weight is saved for backward, and ``get_original_weight`` holds both halves of the codes
    as int64, their looked-up values, the scaled halves and the stacked weight at once: 14 bytes a
    weight, in forward and again in backward."""
    from gpudoc.simhelper.kbit import LinearNF4

    with torch.device("meta"):
        layer = LinearNF4(torch.nn.Linear(IN, OUT, bias=False), torch.bfloat16)
    held = {name: rounded(t.untyped_storage().nbytes()) for name, t in [*layer.named_parameters(),
                                                                        *layer.named_buffers()]}
    weights = IN * OUT
    assert held == {"weight": weights // 2, "scalers": weights // 64, "factors": rounded(2 * weights // 64 // 256),
                    "nf4": 512}
    tracker = LiveBytes()
    with tracker:
        for tensor in (*layer.parameters(), *layer.buffers()):
            tracker.track(tensor)
        x = torch.empty(TOKENS, IN, dtype=torch.bfloat16, device="meta", requires_grad=True)
        tracker.track(x)
        hidden = x * 1  # an activation: nothing but the graph could keep it
        start = tracker.live
        tracker.begin()
        out = layer(hidden)
        forward = tracker.end()
        del hidden
        output, inputs = TOKENS * OUT * 2, TOKENS * IN * 2
        assert tracker.live - start == output - inputs  # the layer kept no input for backward
        scalers = weights // 64 * 2  # dequantized to bf16, beside the rest
        assert 14 * weights <= forward.peak_bytes - start <= 14 * weights + 2 * scalers + 4 * 512
        tracker.begin()
        out.sum().backward()
        backward = tracker.end()
    # Backward dequantizes the same way again, beside the input's gradient.
    rise = backward.peak_bytes - backward.start_bytes
    assert 14 * weights <= rise <= 14 * weights + 2 * scalers + inputs + 4 * 512
    assert layer.weight.grad is None
