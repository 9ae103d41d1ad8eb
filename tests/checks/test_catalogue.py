import re

import pytest

from gpudoc.checks import CATALOGUE, IDS, Check, run_checks, select
from gpudoc.errors import UsageError
from gpudoc.findings import Severity
from tests.checks._real import A5000, EIGHT_1080, T4, profile, snap

REQUIRED = {
    "driver.nvml", "driver.torch-cuda", "gpu.visible", "gpu.free-memory", "proc.stray", "env.alloc-conf",
    "env.tokenizers-parallelism", "env.omp-threads", "env.cuda-launch-blocking", "env.nccl-fail-fast", "host.shm",
    "host.ram-offload", "host.disk", "gpu.ecc", "gpu.throttle", "gpu.mig", "gpu.compute-mode", "gpu.persistence",
}


def test_catalogue_ids_are_stable_and_kebab():
    assert set(IDS) == REQUIRED and len(IDS) == len(set(IDS))
    for check in CATALOGUE:
        assert re.fullmatch(r"[a-z]+\.[a-z0-9]+(-[a-z0-9]+)*", check.id)
        assert check.id.split(".")[0] == check.group


@pytest.mark.parametrize("name", ["telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml",
                                  "nvidia-htop__test__FAKE_STDIN.txt"])
def test_every_non_ok_finding_has_a_remedy(name):
    facts = snap(name, env={"CUDA_LAUNCH_BLOCKING": "1", "OMP_NUM_THREADS": "64", "PYTORCH_ALLOC_CONF": "foo:1"})
    findings = run_checks(facts, profile(gpu={"count": 2, "min_free_gib": 12}, train={"offload_optimizer": True},
                                         model={"params": 1e9}))
    assert {f.id for f in findings} == REQUIRED
    for f in findings:
        if f.severity not in (Severity.OK,) and f.severity is not Severity.SKIP:
            assert f.remedy, f


def test_a_crashing_check_becomes_an_error_and_the_rest_run():
    def boom(facts, profile, ctx):
        raise KeyError("gpus")

    broken = tuple(Check(c.id, c.group, c.title, boom, c.needs) if c.id == "gpu.ecc" else c for c in CATALOGUE)
    findings = run_checks(snap(T4), None, catalogue=broken)
    error = [f for f in findings if f.severity is Severity.ERROR]
    assert [f.id for f in error] == ["gpu.ecc"]
    assert "KeyError" in error[0].detail and error[0].remedy.startswith("gpudoc check --skip gpu.ecc")
    assert len({f.id for f in findings}) == len(REQUIRED)


def test_only_skip_and_groups():
    assert [c.id for c in select(only=["env"])] == [c.id for c in CATALOGUE if c.group == "env"]
    assert "host.shm" not in [c.id for c in select(skip=["host.shm,gpu.ecc"])]
    findings = run_checks(snap(T4), None, only=["gpu.ecc"])
    assert {f.id for f in findings} == {"gpu.ecc"}


def test_unknown_ids_are_a_usage_error_with_did_you_mean():
    with pytest.raises(UsageError, match=r"unknown check 'gpu.free-mem' \(did you mean 'gpu.free-memory'\?\)"):
        select(only=["gpu.free-mem"])
    with pytest.raises(UsageError, match="--skip"):
        select(skip=["nope"])


def test_unknown_gpu_index_is_a_usage_error():
    with pytest.raises(UsageError, match="no GPU 5 here"):
        run_checks(snap(A5000), None, gpus=[5])


def test_gpus_restricts_the_gpu_checks():
    findings = run_checks(snap(EIGHT_1080), None, gpus=[3], only=["gpu.free-memory"])
    assert all(f.affects in ((), ("gpu:3",)) for f in findings)
    assert findings[0].title.startswith("GPU 3:")


def test_profile_dependent_checks_skip_without_profile():
    findings = {f.id: f for f in run_checks(snap(A5000), None)}
    assert findings["env.nccl-fail-fast"].severity is Severity.SKIP
    assert findings["host.ram-offload"].severity is Severity.SKIP
    assert findings["env.nccl-fail-fast"].remedy == "gpudoc check -p PROFILE"


def test_host_checks_skip_when_the_facts_hold_no_host():
    # What a saved nvidia-smi file gives: no host facts, and the reason. Judging this machine's
    # /dev/shm, CPUs and disk instead would pass or fail the wrong box.
    from gpudoc.facts.model import HostFacts

    why = "nvidia-smi output says nothing of its machine's CPUs"
    facts = snap(T4, host=HostFacts(unavailable={"host": why}))
    findings = run_checks(facts, profile(gpu={"count": 2}, train={"offload_optimizer": True}, model={"params": 1e9}),
                          only=["host", "env.omp-threads"])
    assert {f.id for f in findings} == {"host.shm", "host.ram-offload", "host.disk", "env.omp-threads"}
    for f in findings:
        assert f.severity is Severity.SKIP, f
        assert f.title.endswith(": not checked (the snapshot has no host facts)")
        assert f.detail == why
        assert f.remedy.startswith("on that machine: gpudoc check --json")
    # With the host facts a gpudoc --json snapshot carries, the same checks run.
    ran = run_checks(snap(T4), profile(), only=["host.shm", "host.disk", "env.omp-threads"])
    assert [f.severity for f in ran] == [Severity.OK, Severity.OK, Severity.OK]
