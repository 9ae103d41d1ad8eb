"""Quantizing a 4-bit model at load, op for op on meta under the live-bytes tracker: torchao's
``to_nf4`` whole (0.1) or in chunks (0.2 on), bitsandbytes' packing; each held to the formula's
term (``terms.nf4_load_bytes``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpudoc.estimate import terms  # noqa: E402
from gpudoc.simhelper.kbit import Linear4bit, LinearNF4  # noqa: E402
from gpudoc.simhelper.load import CHUNK, quantize_largest, to_nf4, torchao_chunks  # noqa: E402
from gpudoc.simhelper.tracker import LiveBytes  # noqa: E402

IN, OUT = 4096, 2048
N = IN * OUT  # more than one chunk of torchao's


def _rise(quantize) -> int:
    """Bytes the quantization of a fresh bf16 OUT x IN weight holds at its peak, the weight included."""
    tracker = LiveBytes()
    with tracker:
        tracker.begin()
        weight = torch.empty(OUT, IN, dtype=torch.bfloat16, device="meta")
        packed = quantize(weight)
        assert packed.dtype == torch.uint8 and packed.numel() == N // 2
        del weight, packed
        window = tracker.end()
    return window.peak_bytes - window.start_bytes


def test_torchao_0_1_holds_sixteen_bf16_distances_per_weight_twice_at_once():
    """The weight, its scaled copy, and ``(value - nf4)`` live with its ``.abs()``: 68 bytes a weight;
    the per-block absmax (a bf16 per 64) beside them."""
    rise = _rise(lambda w: to_nf4(w, chunked=False))
    assert terms.nf4_load_bytes(N, library="torchao-0.1") == 68 * N
    assert 68 * N <= rise <= 68 * N + N // 32 + 4 * 512


def test_torchao_from_0_2_quantizes_a_chunk_at_a_time():
    """The weight, its scaled copy and the uint8 codes, with one chunk's distances: a tenth of 0.1's."""
    rise = _rise(lambda w: to_nf4(w, chunked=True))
    formula = terms.nf4_load_bytes(N, library="torchao")
    assert formula == 5 * N + 64 * CHUNK
    assert formula <= rise <= formula + N // 32 + 8 * CHUNK + 4 * 512
    assert rise < _rise(lambda w: to_nf4(w, chunked=False)) / 5


@pytest.mark.parametrize(("version", "chunked"), [("0.1", False), ("0.1.0", False), ("0.2.0", True),
                                                  ("0.13.0+cu126", True), (None, True), ("dev", True)])
def test_the_release_decides_whether_torchao_chunks(version, chunked):
    assert torchao_chunks(version) is chunked


def _model(layer_type):
    with torch.device("meta"):
        small, large = torch.nn.Linear(IN, IN // 4, bias=False), torch.nn.Linear(IN, OUT, bias=False)
        return torch.nn.Sequential(layer_type(small, torch.bfloat16), layer_type(large, torch.bfloat16))


@pytest.mark.parametrize(("layer_type", "version", "library", "low", "high"), [
    (LinearNF4, "0.1", "torchao-0.1", 68 * N, 69 * N),
    (LinearNF4, "0.6.1", "torchao", 5 * N + 64 * CHUNK, 6 * N + 72 * CHUNK),
    (Linear4bit, None, "bitsandbytes", 2 * N, 3 * N)])
def test_the_load_peaks_with_every_weight_and_the_largest_layers_quantization(layer_type, version, library,
                                                                              low, high):
    model = _model(layer_type)
    tracker = LiveBytes()
    with tracker:
        for tensor in (*model.parameters(), *model.buffers()):
            tracker.track(tensor)
        weights = tracker.live
        load = quantize_largest(model, tracker, torchao_version=version)
    assert load is not None
    assert load["library"] == library and load["largest"] == [OUT, IN]
    assert load["weights_bytes"] == weights
    assert low <= load["temporaries_bytes"] <= high
    assert load["peak_bytes"] == load["weights_bytes"] + load["temporaries_bytes"]
    assert tracker.stage == "setup" and tracker.live == load["weights_bytes"]  # nothing left behind


def test_a_model_without_4bit_layers_has_no_load_phase():
    with torch.device("meta"):
        model = torch.nn.Linear(IN, OUT)
    tracker = LiveBytes()
    with tracker:
        assert quantize_largest(model, tracker, torchao_version="0.1") is None
