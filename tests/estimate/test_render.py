"""The estimate's text: both answers a peak can mean, the first step and the steady state, and which
one a one-step benchmark measures."""

from __future__ import annotations

import io

from gpudoc.estimate import estimate
from gpudoc.estimate.render import render_estimate
from gpudoc.output import Console
from gpudoc.profiles.model import Profile
from gpudoc.units import format_bytes

MODEL = {"hidden": 2048, "layers": 16, "heads": 16, "kv_heads": 8, "ffn": 8192, "vocab": 32000}


def _text(train: dict) -> tuple[str, dict]:
    est = estimate(Profile(name="p", model=MODEL, train={"precision": "bf16", "micro_batch_size": 1, **train}))
    out = io.StringIO()
    render_estimate(est, Console(out=out, colour=False), profile_name="p")
    return out.getvalue(), est.phases


def _line(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(label))


def test_long_sequences_peak_in_the_steady_state_above_what_a_one_step_benchmark_measures():
    text, phases = _text({"max_seq_len": 8192})
    assert phases["first_step"] < phases["steady_state"]  # the states sit beside the activations
    first, steady = _line(text, "first step"), _line(text, "steady state")
    assert format_bytes(phases["first_step"]) in first and "what a one-step benchmark measures" in first
    assert format_bytes(phases["steady_state"]) in steady and steady.endswith("<- the peak")
    assert "the peak" not in first


def test_each_phase_is_printed_once_with_the_peak_marked_once():
    text, _ = _text({"max_seq_len": 256})
    assert sum("<- the peak" in line for line in text.splitlines()) == 1
    assert len([line for line in text.splitlines() if line.strip().startswith(("first step", "steady state"))]) == 2


def test_a_4bit_model_that_peaks_at_load_says_so_above_both_steps():
    text, phases = _text({"max_seq_len": 16, "precision": "bf16-true", "quantization": "nf4", "lora_rank": 8})
    assert phases["load"] > max(phases["first_step"], phases["steady_state"])
    assert "peak while the model loads, before the first step" in text
    load = _line(text, "load")
    assert format_bytes(phases["load"]) in load and load.endswith("<- the peak")
    assert sum("<- the peak" in line for line in text.splitlines()) == 1
