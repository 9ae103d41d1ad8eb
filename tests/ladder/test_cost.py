"""What a rung costs in time: measured on the job's own runs, else the published figure named as such;
the cheaper in time first among the rungs expected to fit; after spare memory, speed bought back."""

from __future__ import annotations

import pytest

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder import suggest, upward_result
from gpudoc.ladder.cost import cheaper_first, step_cost
from gpudoc.ladder.model import Suggestion
from gpudoc.runs.record import RunRecord
from gpudoc.units import GIB
from tests.ladder.helpers import by_rung, fake_estimate, no_estimate, oom, profile

TRAIN = {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "max_seq_len": 1024, "gradient_checkpointing": False,
         "precision": "fp32"}


def _timed(run_id: str, knobs: dict, seconds: float | None, *, peak: int | None = None) -> RunRecord:
    return RunRecord(id=run_id, command=["python", "train.py"], cwd="/", profile={"knobs": knobs, "env": {}},
                     cause="ok", status="ok", exit_code=0, diagnosis=Diagnosis(cause="ok", summary=""),
                     peak_memory_bytes={"0": peak} if peak else {},
                     gpus=[{"index": 0, "name": "NVIDIA A10G", "total_bytes": 24 * GIB}],
                     steps={"seconds_per_step": seconds} if seconds else None)


def test_a_measured_cost_wins_over_the_published_one_and_an_unknown_is_never_guessed():
    history = [_timed("a", TRAIN, 0.5), _timed("b", {**TRAIN, "gradient_checkpointing": True}, 0.6),
               _timed("c", {**TRAIN, "precision": "bf16"}, None)]
    ckpt = step_cost("gradient-checkpointing", {"gradient_checkpointing": [False, True]}, history)
    assert ckpt is not None and ckpt.change == pytest.approx(0.2)
    assert ckpt.basis == "measured on this job: run a 0.5 s/step, run b 0.6 s/step"
    published = step_cost("gradient-checkpointing", {"gradient_checkpointing": [False, True]}, [])
    assert published is not None and published.change == 0.2 and "published typical cost" in published.basis
    assert step_cost("mixed-precision", {"precision": ["fp32", "bf16"]}, history) is None  # c timed nothing
    assert step_cost("expandable-segments", {}, []).change == 0  # type: ignore[union-attr]


def test_between_rungs_expected_to_fit_the_cheaper_in_time_comes_first():
    # This job's own runs (tune's trials, say): the micro batch the rung proposes (4 x 2 -> 1 x 8) made
    # each step 50% slower; the published cost of checkpointing is 20%. Both cover the 0.5 GiB short.
    history = [_timed("t4", TRAIN, 0.5), _timed("t1", {**TRAIN, "micro_batch_size": 1, "gradient_accumulation_steps": 8},
                                                0.75)]
    diagnosis = oom(requested=GIB, free=GIB // 2, allocated=15 * GIB)
    result = suggest(diagnosis, profile(TRAIN), history=history, estimate=fake_estimate)
    assert [s.rung for s in result.suggestions] == ["gradient-checkpointing", "halve-micro-batch", "mixed-precision"]
    [note] = [n for n in result.notes if "goes before" in n]
    assert note.startswith("gradient-checkpointing goes before halve-micro-batch: both are expected to fit")
    assert "+20% step time (the published typical cost" in note and "+50% step time (measured on this job" in note
    # Without the job's measurement the ladder's own order stands.
    plain = suggest(diagnosis, profile(TRAIN), estimate=fake_estimate)
    assert [s.rung for s in plain.suggestions] == ["halve-micro-batch", "gradient-checkpointing", "mixed-precision"]
    assert not any("goes before" in n for n in plain.notes)


def test_a_rung_not_expected_to_fit_is_never_moved_ahead():
    cheap = Suggestion("gradient-checkpointing", {"gradient_checkpointing": [False, True]}, {}, False, GIB, "")
    dear = Suggestion("halve-micro-batch", {"micro_batch_size": [4, 2]}, {}, False, 4 * GIB, "")
    assert cheaper_first([dear, cheap], 2 * GIB, []) == ([dear, cheap], [])  # 1 GiB does not cover 2 GiB
    assert cheaper_first([dear, cheap], None, []) == ([dear, cheap], [])


def test_after_a_run_with_spare_memory_fix_proposes_turning_checkpointing_off_with_its_figures():
    knobs = {**TRAIN, "gradient_checkpointing": True}
    run = _timed("ok1", knobs, 0.94, peak=6 * GIB)
    result = upward_result(profile(knobs), run, estimate=fake_estimate)
    first = result.suggestions[0]
    assert first.rung == "drop-gradient-checkpointing" and first.changes == {"gradient_checkpointing": [True, False]}
    # fake_estimate: activations 4 GiB at micro 4, a quarter with checkpointing: 3 GiB more without it.
    assert first.expected_saving_bytes == -3 * GIB
    assert "predicted to peak at 9.0 GiB" in first.why and "0.94 s -> 0.783 s per step" in first.why
    assert "-17%" in first.why and "published typical cost" in first.why
    assert by_rung(result)["raise-micro-batch"]  # the bigger micro batch is still offered, after it


def test_no_speed_back_when_nothing_predicts_the_peak_or_it_would_not_fit():
    knobs = {**TRAIN, "gradient_checkpointing": True}
    blind = upward_result(profile(knobs), _timed("ok1", knobs, 0.9, peak=6 * GIB), estimate=no_estimate)
    assert "drop-gradient-checkpointing" not in by_rung(blind)
    assert any("nothing predicts the peak without it" in n for n in blind.notes)
    # A run of this job without checkpointing peaked at 23 GiB: over the 85% target of 24 GiB.
    history = [_timed("off", TRAIN, 0.7, peak=23 * GIB)]
    full = upward_result(profile(knobs), _timed("ok1", knobs, 0.9, peak=6 * GIB), estimate=fake_estimate,
                         history=history)
    assert "drop-gradient-checkpointing" not in by_rung(full)
    assert any("stays on" in n and "run off" in n for n in full.notes)


def test_a_bigger_micro_batch_measured_faster_on_the_jobs_own_runs_says_so_and_comes_first():
    knobs = {**TRAIN, "micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": True}
    # A trial of this job at 8 x 1 (tune's, say) against the run at 2 x 4: 40% faster per step.
    history = [_timed("m8", {**knobs, "micro_batch_size": 8, "gradient_accumulation_steps": 1}, 0.6)]
    result = upward_result(profile(knobs), _timed("ok1", knobs, 1.0, peak=4 * GIB), estimate=fake_estimate,
                           history=history)
    raised = result.suggestions[0]
    assert raised.rung == "raise-micro-batch" and raised.changes["micro_batch_size"] == [2, 8]
    assert raised.why.endswith("(-40% step time (measured on this job: run ok1 1 s/step, run m8 0.6 s/step))")
    assert [s.rung for s in result.suggestions] == ["raise-micro-batch", "drop-gradient-checkpointing"]
