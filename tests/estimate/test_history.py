"""Learning from runs: measured peaks correct the per-sample (and, with two batch sizes, the
static) part so that the next estimate is closer to the truth."""

from __future__ import annotations

from dataclasses import replace

from gpudoc.estimate import estimate_inputs, terms
from gpudoc.estimate.history import correction_from_history, linear_parts
from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup
from gpudoc.estimate.model import compute_phases
from gpudoc.runs.record import RunRecord

SHAPE = ModelShape(layers=24, hidden=2048, heads=16, kv_heads=16, ffn=5632, vocab=32000, params=1.3e9)
KNOBS = {"max_seq_len": 2048, "precision": "bf16-true", "gradient_checkpointing": False, "optimizer": "adamw"}


def _inputs(micro_batch: int) -> Inputs:
    return Inputs(shape=SHAPE, setup=TrainSetup(micro_batch_size=micro_batch, seq_len=2048, precision="bf16-true"))


def _truth(micro_batch: int, *, static_scale=0.9, per_sample_scale=1.6) -> float:
    """A different 'true' model: static 10% lower, activations 60% higher than modelled."""
    static, slope = linear_parts(_inputs(1))
    return static_scale * static + per_sample_scale * slope * micro_batch


def _record(micro_batch: int, run_id: str, **kw) -> RunRecord:
    allocated = _truth(micro_batch)
    kept = compute_phases(_inputs(micro_batch)).resident  # weights and Adam's states: no slack on them
    nvml = allocated + terms.allocator_slack_bytes(allocated, kept, expandable_segments=False) + terms.cuda_context_bytes()
    fields = {"id": run_id, "command": ["train"], "cwd": ".", "status": "ok", "exit_code": 0,
                  "profile": {"name": "p", "knobs": {**KNOBS, "micro_batch_size": micro_batch}},
                  "peak_memory_bytes": {"0": int(nvml)}}
    fields.update(kw)
    return RunRecord(**fields)


def _error(estimate_bytes: float, target_batch: int) -> float:
    return abs(estimate_bytes - _truth(target_batch)) / _truth(target_batch)


def test_one_measured_run_rescales_the_per_sample_part_and_improves_the_estimate():
    target = _inputs(8)
    first = estimate_inputs(target)
    assert first.source == "formula"
    second = estimate_inputs(target, history=[_record(2, "r1")])
    assert second.source == "formula corrected by 1 measured run"
    assert _error(second.peak_bytes, 8) < _error(first.peak_bytes, 8)
    correction = correction_from_history(target, [_record(2, "r1")])
    assert correction.static_scale == 1.0 and correction.per_sample_scale > 1.5


def test_two_batch_sizes_recover_both_scales_by_least_squares():
    history = [_record(1, "r1"), _record(4, "r2"), _record(2, "r3")]
    correction = correction_from_history(_inputs(8), history)
    assert abs(correction.static_scale - 0.9) < 0.01
    assert abs(correction.per_sample_scale - 1.6) < 0.01
    third = estimate_inputs(_inputs(8), history=history)
    assert third.source == "formula corrected by 3 measured runs"
    assert _error(third.peak_bytes, 8) < 0.01
    one_run = estimate_inputs(_inputs(8), history=history[:1])
    assert _error(third.peak_bytes, 8) <= _error(one_run.peak_bytes, 8)


def test_corrected_estimate_lowers_the_largest_micro_batch_when_activations_were_underestimated():
    gpu = 24 * 1024**3
    plain = estimate_inputs(_inputs(1), gpu_total_bytes=gpu)
    corrected = estimate_inputs(_inputs(1), gpu_total_bytes=gpu, history=[_record(2, "r1")])
    assert corrected.max_micro_batch_size < plain.max_micro_batch_size
    assert corrected.per_sample_bytes > plain.per_sample_bytes


def test_runs_without_a_usable_peak_are_ignored():
    oom = _record(2, "r1", cause="gpu_oom", status="failed")
    running = _record(2, "r2", status="running")
    empty = _record(2, "r3", peak_memory_bytes={})
    no_knobs = _record(2, "r4", profile={"name": "p"})
    assert correction_from_history(_inputs(8), [oom, running, empty, no_knobs]) is None
    assert estimate_inputs(_inputs(8), history=[oom]).source == "formula"


def test_scales_carry_over_to_changed_knobs():
    history = [_record(1, "r1"), _record(4, "r2")]
    changed = replace(_inputs(8), setup=replace(_inputs(8).setup, gradient_checkpointing="full"))
    plain = estimate_inputs(changed)
    corrected = estimate_inputs(changed, history=history)
    assert corrected.peak_bytes != plain.peak_bytes
