"""The ladder as a whole: order, semantic gating, user rungs, skipping by saving, history, upward."""

from __future__ import annotations

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder import suggest, upward
from gpudoc.ladder.model import LadderResult, Suggestion
from gpudoc.runs.record import RunRecord
from gpudoc.units import GIB, MIB
from tests.ladder.helpers import by_rung, fake_estimate, no_estimate, oom, profile

SPEC_KEYS = {"rung", "changes", "env", "semantic", "expected_saving_bytes", "why"}

FULL = {
    "micro_batch_size": 4, "gradient_accumulation_steps": 4, "max_seq_len": 2048,
    "gradient_checkpointing": False, "precision": "fp32", "zero_stage": 0,
    "offload_optimizer": False, "offload_params": False, "lora_rank": 64,
}


def test_rungs_come_in_the_spec_order():
    result = suggest(oom(others=[(5, GIB)]), profile(FULL, launch={"nproc_per_node": 2}),
                     allow_semantic=True, estimate=no_estimate)
    assert [s.rung for s in result.suggestions] == [
        "expandable-segments", "free-stray-memory", "halve-micro-batch", "gradient-checkpointing",
        "mixed-precision", "zero-stage", "offload-optimizer", "offload-params",
        "shorter-sequences", "smaller-lora-rank",
    ]


def test_suggestion_to_dict_has_exactly_the_spec_keys():
    result = suggest(oom(), profile(FULL), estimate=fake_estimate)
    for s in result.suggestions:
        d = s.to_dict()
        assert set(d) == SPEC_KEYS
        assert all(isinstance(v, list) and len(v) == 2 for v in d["changes"].values())
        assert d["expected_saving_bytes"] is None or isinstance(d["expected_saving_bytes"], int)


def test_semantic_rungs_held_back_without_permission():
    result = suggest(oom(), profile(FULL), estimate=no_estimate)
    assert all(not s.semantic for s in result.suggestions)
    assert [s.rung for s in result.semantic_held_back] == ["shorter-sequences", "smaller-lora-rank"]
    assert result.held_back == result.semantic_held_back
    assert not result.exhausted


def test_semantic_rungs_with_permission_come_after_non_semantic_ones():
    result = suggest(oom(), profile(FULL), allow_semantic=True, estimate=no_estimate)
    semantic = [i for i, s in enumerate(result.suggestions) if s.semantic]
    plain = [i for i, s in enumerate(result.suggestions) if not s.semantic]
    assert semantic and max(plain) < min(semantic)
    seq = by_rung(result)["shorter-sequences"]
    assert seq.changes == {"max_seq_len": [2048, 1536]}
    assert by_rung(result)["smaller-lora-rank"].changes == {"lora_rank": [64, 32]}


def test_profile_ladder_allow_semantic_counts_as_permission():
    result = suggest(oom(), profile(FULL, ladder={"allow_semantic": True}), estimate=no_estimate)
    assert "shorter-sequences" in by_rung(result)


def test_exhausted_non_semantic_ladder_says_so_and_lists_held_back():
    train = {"micro_batch_size": 1, "max_seq_len": 512, "gradient_checkpointing": True}
    result = suggest(oom(), profile(train, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}), estimate=no_estimate)
    assert result.suggestions == []
    assert result.exhausted
    assert [s.rung for s in result.semantic_held_back] == ["shorter-sequences"]
    assert any("non-semantic ladder is exhausted" in n and "shorter-sequences" in n for n in result.notes)


def test_not_a_memory_failure_gives_no_suggestions():
    for cause in ("host_oom", "nccl_timeout", "error", "shm"):
        result = suggest(Diagnosis(cause=cause, summary="x"), profile(FULL))
        assert isinstance(result, LadderResult)
        assert result.suggestions == [] and result.notes
        assert "not a GPU memory failure" in result.notes[0]


def test_user_rungs_halve_decrement_set_and_min():
    ladder = {"rung": [
        {"name": "fewer-negatives", "knob": "n_negatives", "op": "halve", "semantic": True, "min": 16},
        {"name": "smaller-k", "knob": "k", "op": "decrement"},
        {"name": "no-ema", "knob": "ema", "op": "set", "value": False},
        {"name": "ghost", "knob": "not_declared", "op": "halve"},
    ]}
    train = {"n_negatives": 24, "k": 3, "ema": True}
    result = suggest(oom(), profile(train, ladder=ladder), allow_semantic=True, estimate=no_estimate)
    rungs = by_rung(result)
    assert rungs["fewer-negatives"].changes == {"n_negatives": [24, 16]}  # 12 would be under min 16
    assert rungs["fewer-negatives"].semantic
    assert rungs["smaller-k"].changes == {"k": [3, 2]} and not rungs["smaller-k"].semantic
    assert rungs["no-ema"].changes == {"ema": [True, False]}
    assert "ghost" not in rungs
    assert any(s.rung == "ghost" and "not declared" in s.reason for s in result.skipped)


def test_user_rung_at_minimum_is_skipped():
    ladder = {"rung": [{"name": "fewer-negatives", "knob": "n_negatives", "op": "halve", "min": 16}]}
    result = suggest(oom(), profile({"n_negatives": 16}, ladder=ladder), estimate=no_estimate)
    assert "fewer-negatives" not in by_rung(result)


def test_user_rung_saving_fraction_uses_the_activation_estimate():
    ladder = {"rung": [{"name": "fewer-negatives", "knob": "n_negatives", "op": "halve", "saving_fraction": 0.5}]}
    train = {"n_negatives": 24, "micro_batch_size": 1, "max_seq_len": 4096}
    est = fake_estimate(profile(train))
    result = suggest(oom(requested=512 * MIB, free=0, allocated=20 * GIB), profile(train, ladder=ladder), estimate=est)
    assert by_rung(result)["fewer-negatives"].expected_saving_bytes == 2 * GIB


# -- skipping by saving -----------------------------------------------------------------------

def test_rungs_that_cannot_cover_the_shortfall_are_skipped():
    train = {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": False,
             "precision": "bf16", "max_seq_len": 1024}
    # fake_estimate: activations 1 GiB (2 samples, bf16); checkpointing frees 0.75 GiB, halving 0.5 GiB.
    diag = oom(requested=1 * GIB, free=300 * MIB, allocated=12 * GIB, frag=10 * MIB)
    result = suggest(diag, profile(train), estimate=fake_estimate)
    assert [s.rung for s in result.suggestions] == ["gradient-checkpointing"]
    skipped = {s.rung: s.reason for s in result.skipped}
    assert "less than the" in skipped["halve-micro-batch"]
    assert "less than the" in skipped["expandable-segments"]
    assert result.shortfall_bytes == 1 * GIB - 300 * MIB


def test_without_estimate_or_measurement_the_order_decides():
    train = {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": False}
    diag = oom(requested=8 * GIB, free=300 * MIB, frag=10 * MIB)
    result = suggest(diag, profile(train), estimate=no_estimate)
    assert [s.rung for s in result.suggestions] == ["expandable-segments", "halve-micro-batch", "gradient-checkpointing"]


def test_when_no_rung_covers_the_shortfall_all_are_kept_in_order():
    train = {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": False, "precision": "bf16"}
    # Estimated peak 13 GiB agrees with the 12 GiB the run needed; nothing frees the 4 GiB short.
    diag = oom(requested=4 * GIB, free=0, allocated=8 * GIB)
    result = suggest(diag, profile(train), estimate=fake_estimate)
    assert [s.rung for s in result.suggestions][:2] == ["expandable-segments", "halve-micro-batch"]
    assert any("no single rung" in n for n in result.notes)


def test_estimate_below_the_measured_need_skips_nothing():
    train = {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": False, "precision": "bf16"}
    diag = oom(requested=1 * GIB, free=300 * MIB, allocated=40 * GIB, total=44 * GIB)
    result = suggest(diag, profile(train), estimate=fake_estimate)
    assert "halve-micro-batch" in by_rung(result)
    assert any("below what the run needed" in n for n in result.notes)


def test_shortfall_from_estimate_when_the_message_has_no_numbers():
    train = {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "precision": "bf16"}
    diag = Diagnosis(cause="gpu_oom", backend="cuda", summary="CUDA error: out of memory")
    # peak = 2 + 2 + 8 + 4 GiB = 16 GiB vs 0.85 × 16 GiB.
    result = suggest(diag, profile(train, gpu={"memory_gib": 16}), estimate=fake_estimate)
    assert result.shortfall_bytes == 16 * GIB - int(16 * GIB * 0.85)


# -- history ----------------------------------------------------------------------------------

def _record(run_id, knobs, *, cause="gpu_oom", peak=None, status="failed", env=None):
    return RunRecord(
        id=run_id, command=["python", "train.py"], cwd="/", profile={"knobs": knobs, "env": env or {}}, cause=cause,
        status=status, exit_code=0 if status == "ok" else 1, diagnosis=Diagnosis(cause=cause, summary=""),
        peak_memory_bytes={"0": peak} if peak else {},
    )


def test_configurations_that_already_failed_are_not_proposed_again():
    train = {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": False}
    tried = _record("r1", {"micro_batch_size": 1, "gradient_accumulation_steps": 8, "gradient_checkpointing": False})
    result = suggest(oom(), profile(train), history=[tried], estimate=no_estimate)
    assert "halve-micro-batch" not in by_rung(result)
    assert any(s.rung == "halve-micro-batch" and "r1" in s.reason for s in result.skipped)


def test_measured_runs_give_the_micro_batch_saving():
    base = {"gradient_checkpointing": True}
    history = [
        _record("a", {**base, "micro_batch_size": 1, "gradient_accumulation_steps": 8}, cause="ok", status="ok", peak=10 * GIB),
        _record("b", {**base, "micro_batch_size": 2, "gradient_accumulation_steps": 4}, cause="ok", status="ok", peak=13 * GIB),
    ]
    train = {**base, "micro_batch_size": 8, "gradient_accumulation_steps": 1}
    result = suggest(oom(requested=2 * GIB, free=GIB, allocated=20 * GIB), profile(train), history=history, estimate=no_estimate)
    s = by_rung(result)["halve-micro-batch"]
    assert s.expected_saving_bytes == 3 * GIB * 4  # 3 GiB per sample × (8 - 4)


# -- upward -----------------------------------------------------------------------------------

def _ok_record(peak, total=24 * GIB, knobs=None):
    r = _record("ok1", knobs or {}, cause="ok", status="ok", peak=peak)
    r.gpus = [{"index": 0, "name": "NVIDIA A10G", "total_bytes": total}]
    return r


def test_upward_proposes_bigger_micro_batch_with_exact_global_batch():
    p = profile({"micro_batch_size": 2, "gradient_accumulation_steps": 32}, launch={"nproc_per_node": 4})
    s = upward(p, _ok_record(5 * GIB), estimate=no_estimate)
    assert isinstance(s, Suggestion)
    assert s.rung == "raise-micro-batch"
    # Worst case without a model: 5 GiB × 2 × ... must stay under 0.85 × 24 GiB = 20.4 GiB: ×4 fits.
    assert s.changes == {"micro_batch_size": [2, 8], "gradient_accumulation_steps": [32, 8]}
    assert s.expected_saving_bytes == -15 * GIB
    assert "256" in s.why


def test_upward_uses_the_estimate_growth_when_available():
    p = profile({"micro_batch_size": 1, "gradient_accumulation_steps": 16, "precision": "bf16"})
    s = upward(p, _ok_record(13 * GIB), estimate=fake_estimate)
    # fake_estimate grows 0.5 GiB per sample: 13 + 0.5 × 15 = 20.5 > 20.4; ×8 → 16.5 GiB fits.
    assert s.changes == {"micro_batch_size": [1, 8], "gradient_accumulation_steps": [16, 2]}


def test_upward_nothing_when_peak_is_close_to_target_or_no_accumulation():
    p = profile({"micro_batch_size": 2, "gradient_accumulation_steps": 32})
    assert upward(p, _ok_record(19 * GIB), estimate=no_estimate) is None
    p = profile({"micro_batch_size": 2, "gradient_accumulation_steps": 1})
    assert upward(p, _ok_record(2 * GIB), estimate=no_estimate) is None


def test_upward_needs_a_successful_run():
    p = profile({"micro_batch_size": 2, "gradient_accumulation_steps": 32})
    r = _ok_record(2 * GIB)
    r.status, r.cause, r.exit_code = "failed", "gpu_oom", 1
    assert upward(p, r, estimate=no_estimate) is None
