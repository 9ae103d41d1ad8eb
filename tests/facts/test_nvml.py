"""gpudoc.facts.nvml against a fake NVML fed by real captures, and against the real (absent) NVML."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpudoc.facts.nvml import decode_throttle_reasons, format_cuda_version, init_error_message, read_gpus
from gpudoc.facts.smi_files import load_snapshot
from tests.conftest import NVIDIA_SMI, REPO
from tests.facts.fake_nvml import (
    DRIVER_NOT_LOADED,
    LIBRARY_NOT_FOUND,
    OLD_DRIVER_MISSING,
    FakeNvml,
    NVMLError,
    exported_symbols,
)

MIB = 1024**2
CAP = "nvidia_gpu_exporter__internal__captures__"
TG = "telegraf__plugins__inputs__nvidia_smi__testdata__"
WHOLE_CAPTURE = NVIDIA_SMI / (CAP + "linux-x86_64__nvidia-h100-mig__590.48.01.txt")
IDLE_APPS = NVIDIA_SMI / (CAP + "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__idle__query-compute-apps.csv")


def test_real_nvml_is_absent_here_and_reported_not_raised():
    driver, cuda, nvml_version, gpus, error = read_gpus()
    assert (driver, cuda, nvml_version, gpus) == (None, None, None, ())
    assert error == "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)"


def test_importing_nvml_module_does_not_import_pynvml():
    code = "import sys, gpudoc.facts.nvml, gpudoc.facts.smi_files; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("code, expected", [
    (LIBRARY_NOT_FOUND, "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)"),
    (DRIVER_NOT_LOADED, "NVIDIA driver not loaded (NVML: Driver Not Loaded"),
    (4, "no permission"),
    (18, "NVIDIA driver/library version mismatch"),
])
def test_init_failures_become_one_line(code, expected):
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "tesla-t4.xml"), init_error=code)
    _, _, _, gpus, error = read_gpus(backend)
    assert gpus == ()
    assert error.startswith(expected)
    assert "nvmlShutdown" not in backend.calls  # nothing to shut down after a failed init
    assert init_error_message(NVMLError(code)) == error


def test_tesla_t4_read_through_nvml_matches_the_capture():
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "tesla-t4.xml"))
    driver, cuda, nvml_version, gpus, error = read_gpus(backend)
    assert error is None
    assert (driver, cuda, nvml_version) == ("515.105.01", "11.7", "515.105")
    (gpu,) = gpus
    assert gpu.name == "Tesla T4"
    assert gpu.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert gpu.memory_total_bytes == 15360 * MIB
    assert gpu.memory_used_bytes == 1032 * MIB
    assert gpu.ecc_mode == "Enabled" and gpu.ecc_errors_uncorrected == 0
    assert gpu.retired_pages_pending is False
    procs = {p.pid: p for p in gpu.processes}
    assert procs[5762].used_memory_bytes == 1005 * MIB and procs[5762].type == "C"
    assert procs[5762].name == "python"  # from nvmlSystemGetProcessName
    assert procs[675].type == "G" and procs[675].name == "/usr/lib/xorg/Xorg"
    assert "nvmlShutdown" in backend.calls


def test_not_supported_fields_become_none_with_a_reason():
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "a100-sxm4-v12.xml"))
    _, _, _, (gpu,), _ = read_gpus(backend)
    assert gpu.utilization_gpu_percent is None  # N/A under MIG in the capture
    assert gpu.unavailable["utilization_gpu_percent"] == "not supported on this GPU/driver"
    assert gpu.compute_capability is None
    assert gpu.memory_total_bytes == 81920 * MIB  # the rest is still read


def test_mig_devices_are_read_with_their_memory_and_empty_slots_skipped():
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (CAP + "linux-x86_64__nvidia-h100-mig__590.48.01__load__nvidia-smi.txt"))
    _, _, _, (gpu,), _ = read_gpus(backend)
    assert gpu.mig["enabled"] is True
    assert [(d["gpu_instance_id"], d["memory_total_bytes"]) for d in gpu.mig["devices"]] == [
        (2, 40448 * MIB), (3, 20096 * MIB), (9, 9984 * MIB), (10, 9984 * MIB)]
    assert {p.pid: (p.gpu_instance_id, p.compute_instance_id) for p in gpu.processes} == {
        21180: (2, 0), 21181: (2, 0), 21198: (2, 0)}


def test_wddm_not_available_memory_sentinel_becomes_none_and_c_plus_g_is_merged():
    backend = FakeNvml.from_snapshot(
        NVIDIA_SMI / (CAP + "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86__load__nvidia-smi.txt"))
    _, _, _, (gpu,), _ = read_gpus(backend)
    procs = {p.pid: p for p in gpu.processes}
    assert len(procs) == 12  # listed by both queries, counted once
    assert procs[2056].type == "C+G" and procs[25704].type == "C"
    assert all(p.used_memory_bytes is None for p in gpu.processes)
    assert procs[2056].gpu_instance_id is None  # 0xFFFFFFFF outside MIG


def test_old_driver_falls_back_to_older_functions():
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "dual_a5000-v13.xml"), old_driver=True)
    _driver, cuda, _, gpus, error = read_gpus(backend)
    assert error is None
    assert cuda == "13.1"  # from nvmlSystemGetCudaDriverVersion (v1)
    assert "nvmlSystemGetCudaDriverVersion" in backend.calls
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in backend.calls
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in backend.calls
    assert "nvmlDeviceGetMemoryInfo" in backend.calls
    assert [g.memory_used_bytes for g in gpus] == [22437 * MIB, 17253 * MIB]
    assert [{p.pid: p.used_memory_bytes for p in g.processes} for g in gpus] == [
        {100477: 22430 * MIB}, {100477: 17246 * MIB}]
    assert gpus[0].throttle_reasons == ()


def test_very_old_driver_without_any_v2_process_function_uses_v1():
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "tesla-t4.xml"), old_driver=True, missing={
        "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2"})
    _, _, _, (gpu,), _ = read_gpus(backend)
    assert {p.pid for p in gpu.processes} == {675, 5762}
    assert "nvmlDeviceGetComputeRunningProcesses" in backend.calls


def test_missing_functions_everywhere_give_driver_too_old_reasons():
    missing = set(OLD_DRIVER_MISSING) | {
        "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetMigMode"}
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "tesla-t4.xml"), missing=missing)
    _, _, _, (gpu,), error = read_gpus(backend)
    assert error is None
    assert gpu.processes is None
    assert "driver too old" in gpu.unavailable["processes"]
    assert gpu.throttle_reasons is None and "driver too old" in gpu.unavailable["throttle_reasons"]
    assert gpu.mig is None and "nvmlDeviceGetMigMode" in gpu.unavailable["mig"]
    assert gpu.memory_total_bytes == 15360 * MIB


def test_every_function_used_is_exported_by_a_real_590_driver():
    symbols = exported_symbols(WHOLE_CAPTURE)
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in symbols
    assert len(symbols) == 405
    backend = FakeNvml.from_snapshot(NVIDIA_SMI / (TG + "dual_a5000-v13.xml"), symbols=symbols)
    _, _, _, gpus, error = read_gpus(backend)
    assert error is None
    for gpu in gpus:
        assert not any("driver too old" in why for why in gpu.unavailable.values()), gpu.unavailable
    used = {c for c in backend.calls if c.startswith("nvml") and c not in ("nvmlInit", "nvmlShutdown")}
    assert used <= symbols


def test_every_fixture_reads_back_through_nvml_the_same():
    for path in sorted(NVIDIA_SMI.iterdir()):
        if path in (WHOLE_CAPTURE, IDLE_APPS):  # several tables; no GPU facts at all: both refused
            continue
        facts = load_snapshot([path])
        _, _, _, gpus, error = read_gpus(FakeNvml(facts))
        assert error is None, path.name
        assert [(g.name, g.memory_total_bytes, g.memory_used_bytes) for g in gpus] == [
            (g.name, g.memory_total_bytes, g.memory_used_bytes) for g in facts.gpus], path.name
        for got, want in zip(gpus, facts.gpus):
            got_procs = sorted((p.pid, p.used_memory_bytes) for p in got.processes or ())
            want_procs = sorted((p.pid, p.used_memory_bytes) for p in want.processes or ())
            assert got_procs == want_procs, path.name


def test_throttle_mask_decoding_ignores_gpu_idle():
    assert decode_throttle_reasons(0x1) == ()
    assert decode_throttle_reasons(0x1 | 0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")


def test_cuda_version_format():
    assert format_cuda_version(12020) == "12.2"
    assert format_cuda_version(13010) == "13.1"
    assert format_cuda_version(10010) == "10.1"


def test_a_raising_binding_becomes_a_reason_not_a_crash():
    class Broken(FakeNvml):
        def nvmlDeviceGetTemperature(self, h, sensor):
            raise RuntimeError("boom")

    facts = load_snapshot([NVIDIA_SMI / (TG + "tesla-t4.xml")])
    _, _, _, (gpu,), _ = read_gpus(Broken(facts))
    assert gpu.temperature_c is None and "boom" in gpu.unavailable["temperature_c"]


def test_the_fake_speaks_the_real_pynvml_surface():
    # The fake must not drift from the binding nvml.py really calls in production.
    import importlib

    real = importlib.import_module("pynvml")
    fake_functions = [n for n in dir(FakeNvml) if n.startswith("nvml")]
    assert fake_functions
    assert [n for n in fake_functions if not hasattr(real, n)] == []
    assert hasattr(real, "nvmlMemory_v2") and hasattr(real, "NVMLError")


def test_a_session_initialises_once_and_reads_what_read_gpus_reads():
    from gpudoc.facts.nvml import Session

    capture = NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"
    backend = FakeNvml.from_snapshot(capture)
    session = Session.open(backend)
    first, second = session(), session()
    session.close()
    assert first == second == read_gpus(FakeNvml.from_snapshot(capture))
    assert [g.memory_total_bytes for g in first[3]] == [24564 * 1024**2] * 2  # as the capture says
    assert backend.calls.count("nvmlInit") == 1 and backend.calls.count("nvmlShutdown") == 1


def test_no_session_without_a_driver():
    from gpudoc.facts.nvml import Session

    backend = FakeNvml.from_snapshot(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml",
                                     init_error=DRIVER_NOT_LOADED)
    assert Session.open(backend) is None
