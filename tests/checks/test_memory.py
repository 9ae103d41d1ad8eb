from __future__ import annotations

from dataclasses import dataclass

from gpudoc.checks._common import CheckContext
from gpudoc.checks.memory import check_free_memory
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A100_MIG, A5000, DOCKER, EIGHT_1080, T4, only, profile, sev, snap


@dataclass
class Est:
    peak_bytes: int
    source: str = "formula"
    total_bytes: int | None = None
    max_micro_batch_size: int | None = None


def test_profile_need_fails_on_the_busy_gpu_and_names_the_source():
    # A5000 capture: GPU 0 has 1.6 GiB free, GPU 1 6.7 GiB. The job needs 4 GiB on each of 2.
    findings = check_free_memory(snap(A5000), profile(gpu={"count": 2, "min_free_gib": 4}), CheckContext())
    f = only(findings, Severity.FAIL)
    assert f.affects == ("gpu:0",)
    assert f.title == "GPU 0: 1.6 GiB free, the job needs 4.0 GiB (gpu.min_free_gib in job)"
    assert "PID 100477" in f.detail
    assert only(findings, Severity.OK).title.startswith("GPU 1: at least 6.7 GiB free")


def test_the_estimate_wins_when_larger_and_is_named():
    findings = check_free_memory(snap(T4), profile(gpu={"min_free_gib": 2}), CheckContext(estimate=Est(14 * 2**30)))
    f = only(findings, Severity.FAIL)
    assert "needs 14.0 GiB (gpudoc estimate (formula))" in f.title
    # 15 GiB card, 13.6 GiB free: the card could hold it, a process is in the way.
    assert f.remedy == "on that machine: ps -o user,pid,ppid,cmd -p 5762"


def test_the_estimate_counts_context_and_slack_not_just_the_allocator_peak():
    # peak 12 GiB fits the T4's 13.6 GiB free, but with context and slack (14 GiB) it does not.
    est = Est(12 * 2**30, total_bytes=14 * 2**30)
    f = only(check_free_memory(snap(T4), profile(gpu={"min_free_gib": 2}), CheckContext(estimate=est)), Severity.FAIL)
    assert "needs 14.0 GiB" in f.title


def test_a_card_too_small_for_the_estimate_says_to_shrink_the_micro_batch():
    # The estimate answers for this profile (it has a [model]), so `gpudoc estimate` can size the batch.
    est = Est(18 * 2**30, max_micro_batch_size=2)
    findings = check_free_memory(snap(T4), profile(gpu={"min_free_gib": 2}, model={"hf_config": "x"}),
                                 CheckContext(estimate=est))
    f = only(findings, Severity.FAIL)
    assert f.remedy == ("the card holds 15.0 GiB: lower micro_batch_size in [train] of job "
                        "(`gpudoc estimate -p job` shows the largest that fits)")


def test_a_card_too_small_without_an_estimate_never_points_at_estimate():
    # a10g-24gb on a T4: min_free_gib 20 on a 15 GiB card, and no [model]: `gpudoc estimate -p` exits 2.
    findings = check_free_memory(snap(T4), profile(gpu={"min_free_gib": 20}), CheckContext())
    f = only(findings, Severity.FAIL)
    assert "the card holds 15.0 GiB, less than min_free_gib in [gpu] of job" in f.remedy
    assert "gpudoc estimate -p" not in f.remedy
    assert "gpudoc profile new NAME --from-gpu --snapshot FILE" in f.remedy  # the facts came from a file
    assert "add [model] to job" in f.remedy


def test_a_card_too_small_with_a_model_the_estimate_cannot_read_says_to_complete_it():
    findings = check_free_memory(snap(T4), profile(gpu={"min_free_gib": 20}, model={"params": 7e9}), CheckContext())
    f = only(findings, Severity.FAIL)
    assert "complete job until `gpudoc estimate -p job` answers" in f.remedy


def test_a_card_too_small_for_the_profile_floor_but_not_the_job_says_to_lower_the_floor():
    findings = check_free_memory(snap(T4), profile(gpu={"min_free_gib": 20}, model={"hf_config": "x"}),
                                 CheckContext(estimate=Est(6 * 2**30)))
    f = only(findings, Severity.FAIL)
    assert f.remedy == "the card holds 15.0 GiB and the job needs about 6.0 GiB: lower min_free_gib in [gpu] of job"


def test_a_card_too_small_for_even_one_sample_does_not_suggest_a_smaller_batch():
    est = Est(40 * 2**30, max_micro_batch_size=0)
    findings = check_free_memory(snap(T4), profile(model={"hf_config": "x"}), CheckContext(estimate=est))
    f = only(findings, Severity.FAIL)
    assert "too little even for micro_batch_size 1" in f.remedy and "lower micro_batch_size" not in f.remedy


def test_tight_margin_warns():
    free = snap(T4).gpus[0].memory_free_bytes
    findings = check_free_memory(snap(T4), EMPTY, CheckContext(estimate=Est(int(free * 0.97))))
    assert only(findings, Severity.WARN).affects == ("gpu:0",)


def test_busy_gpus_suggest_free_ones_instead():
    # 8x GTX 1080: the job runs 2 ranks on GPU 0 and 1 (10.5 GiB used each); GPU 4 has 5.1 GiB free.
    findings = check_free_memory(snap(EIGHT_1080), profile(launch={"nproc_per_node": 1}, gpu={"min_free_gib": 5}),
                                 CheckContext())
    f = only(findings, Severity.FAIL)
    assert f.remedy.startswith("export CUDA_VISIBLE_DEVICES=4")


def test_without_a_need_a_mostly_used_gpu_warns():
    findings = check_free_memory(snap(A5000), EMPTY, CheckContext())
    assert [f.affects for f in sev(findings, Severity.WARN)] == [("gpu:0",), ("gpu:1",)]


def test_container_memory_without_processes_is_named():
    findings = check_free_memory(snap(DOCKER), profile(gpu={"min_free_gib": 2}), CheckContext(gpus=(0,)))
    f = only(findings, Severity.FAIL)
    assert "no visible process" in f.detail


def test_mig_counts_the_largest_instance():
    findings = check_free_memory(snap(A100_MIG), profile(gpu={"min_free_gib": 30}), CheckContext())
    f = only(findings, Severity.FAIL)
    assert "19.5 GiB free (largest MIG instance)" in f.title


def test_gpus_switch_selects_the_gpus():
    findings = check_free_memory(snap(A5000), profile(gpu={"min_free_gib": 4}), CheckContext(gpus=(1,)))
    assert [f.severity for f in findings] == [Severity.OK]


def test_the_gate_weighs_the_steady_state_not_the_first_step():
    """A one-step benchmark's peak (no optimizer states yet) would fit the T4's 13.6 GiB free; every
    later step holds AdamW's states too: the gate and the largest micro batch weigh that one."""
    from gpudoc.estimate import estimate_inputs
    from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup

    shape = ModelShape(layers=16, hidden=1536, heads=16, kv_heads=16, ffn=6144, vocab=32000, params=0.5e9)
    est = estimate_inputs(Inputs(shape, TrainSetup(micro_batch_size=3, seq_len=1024, precision="fp32")),
                          gpu_total_bytes=15 * 2**30)
    first, steady = est.phases["first_step"], est.phases["steady_state"]
    assert first + est.context_bytes + est.slack_bytes < 13.6 * 2**30 < est.total_bytes
    assert steady == est.peak_bytes and first < steady
    f = only(check_free_memory(snap(T4), profile(gpu={"min_free_gib": 2}), CheckContext(estimate=est)), Severity.FAIL)
    assert f"needs {est.total_bytes / 2**30:.1f} GiB" in f.title
    # What tune starts from: the steady state's 2 (its 6 GB of weights and states carry no allocator
    # slack), not the first step's 3.
    assert est.max_micro_batch_size == 2
