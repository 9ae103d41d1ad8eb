from dataclasses import replace

from gpudoc.checks import run_checks
from gpudoc.checks._common import CheckContext
from gpudoc.checks.driver import check_nvml, check_torch_cuda
from gpudoc.facts.model import Facts, HostFacts, TorchFacts
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A5000, T4, snap

CTX = CheckContext()


def test_driver_version_and_gpu_count_from_the_capture():
    f = check_nvml(snap(A5000), EMPTY, CTX)
    assert f.severity is Severity.OK
    assert f.title == "driver 590.44.01, CUDA 13.1, 2 GPUs"


def test_missing_driver_fails_and_gpu_checks_skip_without_crashing():
    facts = Facts(collected_at="now", source="none", nvml_error="NVIDIA driver not loaded (libnvidia-ml.so.1 not found)",
                  host=HostFacts(in_container=False, cpu_count=4))
    findings = run_checks(facts, None)
    nvml = next(f for f in findings if f.id == "driver.nvml")
    assert nvml.severity is Severity.FAIL
    assert "libnvidia-ml.so.1" in nvml.detail
    assert "nvidia-smi" in nvml.remedy
    gpu_ids = [f for f in findings if f.id.startswith(("gpu.", "proc."))]
    assert gpu_ids and all(f.severity is Severity.SKIP for f in gpu_ids)
    assert not [f for f in findings if f.severity is Severity.ERROR]


def test_missing_driver_in_a_container_says_how_to_pass_gpus():
    facts = Facts(collected_at="now", source="none", nvml_error="driver not loaded", host=HostFacts(in_container=True))
    assert "--gpus all" in check_nvml(facts, EMPTY, CTX).remedy


def test_torch_cuda_skips_without_deep():
    f = check_torch_cuda(snap(T4), EMPTY, CTX)
    assert f.severity is Severity.SKIP and f.remedy == "gpudoc check --deep"


def _torch(**kw):
    return TorchFacts(python="/usr/bin/python3", ok=True, torch_version="2.13.0", **kw)


def test_newer_cuda_major_than_the_driver_fails_with_a_matching_wheel():
    # The T4 capture's driver 515.105.01 supports CUDA 11.7: a cu128 wheel cannot run there.
    facts = replace(snap(T4), torch=_torch(cuda_build="12.8", cuda_available=False))
    f = check_torch_cuda(facts, EMPTY, CTX)
    assert f.severity is Severity.FAIL
    assert "11.7" in f.title
    # No published wheel is as old as 11.7 (cu118 is the oldest): the driver must move instead.
    assert f.remedy.startswith("upgrade the NVIDIA driver")


def test_minor_version_newer_than_the_driver_warns():
    facts = replace(snap(A5000), cuda_driver_version="12.2", torch=_torch(cuda_build="12.8", cuda_available=True))
    f = check_torch_cuda(facts, EMPTY, CTX)
    assert f.severity is Severity.WARN
    assert f.remedy.endswith("/whl/cu121")


def test_cpu_only_build_on_a_gpu_machine_fails():
    facts = replace(snap(A5000), torch=_torch(cuda_build=None))
    f = check_torch_cuda(facts, EMPTY, CTX)
    assert f.severity is Severity.FAIL and "CPU-only" in f.title
    assert f.remedy.endswith("/whl/cu130")  # driver 590 supports CUDA 13.1


def test_matching_build_is_ok_and_unimportable_torch_fails():
    ok = check_torch_cuda(replace(snap(A5000), torch=_torch(cuda_build="12.8", cuda_available=True, device_count=2)),
                          EMPTY, CTX)
    assert ok.severity is Severity.OK and "2 device" in ok.detail
    bad = check_torch_cuda(replace(snap(A5000), torch=TorchFacts(python="/venv/bin/python", ok=False,
                                                                  error="ModuleNotFoundError: No module named 'torch'")),
                           EMPTY, CTX)
    assert bad.severity is Severity.FAIL and bad.remedy == "/venv/bin/python -m pip install torch"
