"""Every rung: when it applies, what it changes, and what it says."""

from __future__ import annotations

from gpudoc.ladder import suggest
from gpudoc.ladder.rungs import split_global_batch
from gpudoc.profiles.model import UserRung  # noqa: F401 - documents the shape user rungs take
from gpudoc.units import GIB
from tests.ladder.helpers import by_rung, facts, fake_estimate, no_estimate, oom, profile

SPEC_KEYS = {"rung", "changes", "env", "semantic", "expected_saving_bytes", "why"}


def run(train=None, diag=None, **kw):
    est = kw.pop("estimate", no_estimate)
    prof_kw = {k: kw.pop(k) for k in ("env", "launch", "ladder", "gpu") if k in kw}
    return suggest(diag or oom(), profile(train, **prof_kw), estimate=est, **kw)


# -- expandable-segments ----------------------------------------------------------------------

def test_expandable_segments_proposed_when_missing_with_right_variable_name():
    result = run({}, facts=facts(alloc="PYTORCH_ALLOC_CONF"))
    s = by_rung(result)["expandable-segments"]
    assert s.env == {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert s.changes == {} and not s.semantic


def test_expandable_segments_defaults_to_the_name_every_torch_reads():
    s = by_rung(run({}))["expandable-segments"]
    assert s.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_expandable_segments_not_proposed_when_already_in_profile_env():
    result = run({}, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert "expandable-segments" not in by_rung(result)
    assert any(s.rung == "expandable-segments" and "already set" in s.reason for s in result.skipped)


def test_expandable_segments_not_proposed_when_set_in_environment():
    result = run({}, facts=facts(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}))
    assert "expandable-segments" not in by_rung(result)


def test_expandable_segments_keeps_other_allocator_options_and_updates_both_names():
    result = run({}, env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:False"},
                 facts=facts(alloc="PYTORCH_ALLOC_CONF"))
    s = by_rung(result)["expandable-segments"]
    assert s.env == {
        "PYTORCH_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True",
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True",
    }


def test_expandable_segments_explains_fragmentation_and_counts_it_as_saving():
    diag = oom(requested=2 * GIB, free=1 * GIB, frag=3 * GIB)
    s = by_rung(run({}, diag))["expandable-segments"]
    assert s.expected_saving_bytes == 3 * GIB
    assert "fragmentation" in s.why and "3.0 GiB" in s.why


def test_expandable_segments_not_for_other_backends():
    result = run({}, oom(backend="xla"))
    assert "expandable-segments" not in by_rung(result)


# -- free-stray-memory ------------------------------------------------------------------------

def test_free_stray_memory_proposes_clean_without_profile_changes():
    diag = oom(others=[(4242, 6 * GIB), (77, 0)], gpu=1)
    s = by_rung(run({}, diag))["free-stray-memory"]
    assert s.changes == {} and s.env == {}
    assert not s.changes_profile
    assert s.expected_saving_bytes == 6 * GIB
    assert "gpudoc clean --gpus 1" in s.why and "4242" in s.why


def test_free_stray_memory_not_proposed_without_other_processes():
    assert "free-stray-memory" not in by_rung(run({}))


# -- halve-micro-batch ------------------------------------------------------------------------

def test_halve_micro_batch_keeps_global_batch_exact():
    s = by_rung(run({"micro_batch_size": 2, "gradient_accumulation_steps": 64}, launch={"nproc_per_node": 4}))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [2, 1], "gradient_accumulation_steps": [64, 128]}
    assert "exact at 512" in s.why and "1 × 128 × 4 GPUs" in s.why


def test_halve_micro_batch_keeps_the_global_batch_exact_when_a_smaller_micro_can():
    # 45 × 5 = 225: 22 cannot split it, 15 × 15 can (and 22 × 10 = 220 would change the experiment).
    s = by_rung(run({"micro_batch_size": 45, "gradient_accumulation_steps": 5}))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [45, 15], "gradient_accumulation_steps": [5, 15]}
    assert "exact at 225" in s.why


def test_halve_micro_batch_states_the_drift_when_not_divisible():
    # 47 × 3 = 141 = 3 × 47: no micro batch from 12 to 23 splits it.
    s = by_rung(run({"micro_batch_size": 47, "gradient_accumulation_steps": 3}))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [47, 23], "gradient_accumulation_steps": [3, 6]}
    assert "141 → 138" in s.why and "-2.1%" in s.why


def test_halve_micro_batch_prefers_an_exact_split_close_to_half():
    # 15 × 4 = 60: micro 7 cannot split it exactly, micro 6 (within 20% below the half) can.
    s = by_rung(run({"micro_batch_size": 15, "gradient_accumulation_steps": 4}))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [15, 6], "gradient_accumulation_steps": [4, 10]}
    assert "exact at 60" in s.why


def test_split_global_batch_exact_and_nearest():
    assert split_global_batch(8, 8, 4, 4) == (4, 16, 256)
    assert split_global_batch(45, 5, 1, 22) == (22, 10, 220)
    assert split_global_batch(45, 5, 1, 22, window_low=11) == (15, 15, 225)
    assert split_global_batch(3, 1, 1, 1) == (1, 3, 3)


def test_halve_micro_batch_not_applicable_at_one():
    result = run({"micro_batch_size": 1, "gradient_accumulation_steps": 8})
    assert "halve-micro-batch" not in by_rung(result)
    assert any(s.rung == "halve-micro-batch" and "already 1" in s.reason for s in result.skipped)


def test_halve_micro_batch_without_accumulation_knob_says_global_batch_falls():
    s = by_rung(run({"micro_batch_size": 8}))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [8, 4]}
    assert "not declared" in s.why and "8 → 4" in s.why


def test_halve_micro_batch_with_declared_global_batch_lets_job_derive_accumulation():
    s = by_rung(run({"micro_batch_size": 8, "global_batch_size": 64}))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [8, 4]}
    assert "global_batch_size stays 64" in s.why


def test_halve_micro_batch_halves_again_when_one_halving_cannot_cover_the_shortfall():
    # fake_estimate: 0.5 GiB of activations per sample (bf16, no checkpointing). A 40 GiB card at a 95%
    # target keeps 2 GiB of headroom: one relaunch must free the shortfall plus those 2 GiB.
    train = {"micro_batch_size": 16, "gradient_accumulation_steps": 2, "precision": "bf16"}
    target = {"target_utilization": 0.95}
    diag = oom(requested=2 * GIB, free=1 * GIB, allocated=30 * GIB, total=40 * GIB)
    s = by_rung(run(train, diag, estimate=fake_estimate, ladder=target))["halve-micro-batch"]
    assert s.changes["micro_batch_size"] == [16, 8]  # saving 4 GiB >= 1 + 2 GiB: one halving is enough
    diag = oom(requested=4 * GIB, free=1 * GIB, allocated=30 * GIB, total=40 * GIB)
    s = by_rung(run(train, diag, estimate=fake_estimate, ladder=target))["halve-micro-batch"]
    assert s.changes == {"micro_batch_size": [16, 4], "gradient_accumulation_steps": [2, 8]}
    assert s.expected_saving_bytes == 6 * GIB  # 3 GiB short + 2 GiB headroom: 4 GiB would not do
    assert "halved 2 times" in s.why and "the target's headroom" in s.why
    # The default 85% target keeps 6 GiB of this card: 9 GiB to free, more than the 8 GiB of
    # activations hold, so the rung goes all the way to 1 (and the next rungs take the rest).
    s = by_rung(run(train, diag, estimate=fake_estimate))["halve-micro-batch"]
    assert s.changes["micro_batch_size"] == [16, 1] and s.expected_saving_bytes == int(7.5 * GIB)


# -- knob-declared rule -----------------------------------------------------------------------

def test_no_declared_knobs_means_only_environment_and_process_rungs():
    result = run({}, oom(others=[(9, GIB)]))
    assert [s.rung for s in result.suggestions] == ["expandable-segments", "free-stray-memory"]
    assert all("not declared" in s.reason for s in result.skipped if s.rung not in ("expandable-segments", "free-stray-memory"))
    assert any("declares no [train] knobs" in n for n in result.notes)


# -- gradient-checkpointing, mixed precision, ZeRO, offload ----------------------------------

def test_gradient_checkpointing_turned_on():
    s = by_rung(run({"gradient_checkpointing": False}))["gradient-checkpointing"]
    assert s.changes == {"gradient_checkpointing": [False, True]}
    assert "gradient-checkpointing" not in by_rung(run({"gradient_checkpointing": True}))


def test_selective_checkpointing_goes_to_full():
    s = by_rung(run({"gradient_checkpointing": "selective"}))["gradient-checkpointing"]
    assert s.changes == {"gradient_checkpointing": ["selective", True]}


def test_mixed_precision_bf16_on_ampere():
    s = by_rung(run({"precision": "fp32"}, facts=facts(cc="8.6")))["mixed-precision"]
    assert s.changes == {"precision": ["fp32", "bf16"]}


def test_mixed_precision_fp16_below_compute_capability_8():
    s = by_rung(run({"precision": "fp32"}, facts=facts(cc="7.5")))["mixed-precision"]
    assert s.changes == {"precision": ["fp32", "fp16"]}
    assert "compute capability < 8.0" in s.why


def test_mixed_precision_fp16_from_gpu_name_when_no_compute_capability():
    s = by_rung(run({"precision": "fp32"}, gpu={"name": "Quadro RTX 6000"}))["mixed-precision"]
    assert s.changes["precision"] == ["fp32", "fp16"]


def test_mixed_precision_not_applicable_when_already_16_bit():
    assert "mixed-precision" not in by_rung(run({"precision": "bf16"}))


def test_zero_stage_only_with_several_processes():
    s = by_rung(run({"zero_stage": 1}, launch={"nproc_per_node": 2}))["zero-stage"]
    assert s.changes == {"zero_stage": [1, 2]}
    result = run({"zero_stage": 1})
    assert "zero-stage" not in by_rung(result)
    assert any(s.rung == "zero-stage" and "world_size 1" in s.reason for s in result.skipped)
    assert "zero-stage" not in by_rung(run({"zero_stage": 3}, launch={"nproc_per_node": 2}))


def test_offload_params_brings_zero_3_and_warns_about_host_ram():
    train = {"offload_params": False, "offload_optimizer": False, "zero_stage": 2}
    result = run(train, launch={"nproc_per_node": 4}, facts=facts(ram=10 * GIB), estimate=fake_estimate)
    s = by_rung(result)["offload-params"]
    assert s.changes == {"offload_params": [False, True], "zero_stage": [2, 3]}
    assert "host RAM is short" in s.why
    o = by_rung(result)["offload-optimizer"]
    assert o.changes == {"offload_optimizer": [False, True]}
    # 4 ranks × 2 GiB of ZeRO-sharded optimizer states = 8 GiB, under the 10 GiB available.
    assert "host RAM is enough (8.0 GiB needed, 10.0 GiB available)" in o.why
