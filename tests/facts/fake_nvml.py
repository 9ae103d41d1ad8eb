"""A fake NVML backend fed by real nvidia-smi captures, for ``gpudoc.facts.nvml.read_gpus``.

It speaks pynvml's surface (function names, ``NVMLError`` with ``.value``, structs with the same
attribute names) so the real reading code, fallbacks included, runs against it:

    backend = FakeNvml.from_snapshot(NVIDIA_SMI / "telegraf__...__tesla-t4.xml")
    driver, cuda, nvml_version, gpus, error = read_gpus(backend)

Values the capture does not carry answer NOT_SUPPORTED, as a real driver does for a GPU that
lacks the feature. ``old_driver=True`` removes the functions that older drivers lack (v3 process
queries, ``_v2`` CUDA version and memory info, clock *event* reasons), answering
FUNCTION_NOT_FOUND as pynvml does. ``symbols`` restricts the fake to an exported symbol list
(e.g. the one in the nvidia_gpu_exporter capture). ``init_error`` makes ``nvmlInit`` fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable

from gpudoc.facts.model import Facts, Gpu
from gpudoc.facts.smi_files import load_snapshot

NOT_SUPPORTED = 3
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
NOT_AVAILABLE_ULL = 2**64 - 1
NOT_AVAILABLE_UINT = 2**32 - 1

OLD_DRIVER_MISSING = frozenset({
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetCurrentClocksEventReasons",
})

_THROTTLE_BITS = {
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
_COMPUTE_MODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}


class NVMLError(Exception):
    """pynvml's shape: the NVML return code is in ``.value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {NOT_SUPPORTED: "Not Supported", NOT_FOUND: "Not Found", DRIVER_NOT_LOADED: "Driver Not Loaded",
                LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
                FUNCTION_NOT_FOUND: "Function Not Found"}.get(self.value, f"NVML error {self.value}")


def exported_symbols(capture: Path) -> frozenset[str]:
    """The ``nvml*`` symbols listed in an nvidia_gpu_exporter capture's ``nvml-symbols`` section."""
    text = capture.read_text(encoding="utf-8")
    start = text.index("# capabilities :: nvml-symbols")
    return frozenset(re.findall(r"^(nvml\w+)$", text[start:], flags=re.M))


@dataclass
class _Handle:
    gpu: Gpu
    mig: dict | None = None  # a MIG device dict when this handle is a MIG device


@dataclass
class FakeNvml:
    facts: Facts
    missing: frozenset[str] = frozenset()
    symbols: frozenset[str] | None = None
    init_error: int | None = None
    calls: list[str] = field(default_factory=list)
    nvmlMemory_v2: int = 0x02000028  # pynvml's version tag; any truthy value selects _v2

    NVMLError = NVMLError

    @classmethod
    def from_snapshot(cls, *paths: Path, old_driver: bool = False, symbols: Iterable[str] | None = None,
                      missing: Iterable[str] = (), init_error: int | None = None) -> FakeNvml:
        gone = frozenset(missing) | (OLD_DRIVER_MISSING if old_driver else frozenset())
        return cls(load_snapshot(list(paths)), missing=gone,
                   symbols=frozenset(symbols) if symbols is not None else None, init_error=init_error)

    # -- plumbing ---------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if name in self.missing or (self.symbols is not None and name not in self.symbols):
            raise NVMLError(FUNCTION_NOT_FOUND)

    @staticmethod
    def _need(value):
        if value is None:
            raise NVMLError(NOT_SUPPORTED)
        return value

    # -- library ----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self._need(self.facts.driver_version)

    def _cuda(self) -> int:
        version = self._need(self.facts.cuda_driver_version)
        major, minor = version.split(".")[:2]
        return int(major) * 1000 + int(minor) * 10

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self._cuda()

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self._cuda()

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        driver = self._need(self.facts.driver_version)
        # a 590.48.01 driver reports NVML version 590.48 (nvidia-smi --version in the capture)
        return ".".join(driver.split(".")[:2])

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._enter("nvmlSystemGetProcessName")
        for gpu in self.facts.gpus:
            for proc in gpu.processes or ():
                if proc.pid == pid and proc.name:
                    return proc.name
        raise NVMLError(NOT_FOUND)

    # -- devices ----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.facts.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        return _Handle(self.facts.gpus[index])

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        self._enter("nvmlDeviceGetName")
        return self._need(h.gpu.name)

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID")
        return self._need(h.mig["uuid"] if h.mig is not None else h.gpu.uuid)

    def nvmlDeviceGetPciInfo(self, h: _Handle):
        self._enter("nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=self._need(h.gpu.bus_id))

    def nvmlDeviceGetMemoryInfo(self, h: _Handle, version=None):
        self._enter("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo")
        if h.mig is not None:
            src = h.mig
            return SimpleNamespace(total=self._need(src["memory_total_bytes"]), used=src["memory_used_bytes"],
                                   free=src["memory_free_bytes"])
        gpu = h.gpu
        return SimpleNamespace(total=self._need(gpu.memory_total_bytes), used=self._need(gpu.memory_used_bytes),
                               free=self._need(gpu.memory_free_bytes))

    def nvmlDeviceGetUtilizationRates(self, h: _Handle):
        self._enter("nvmlDeviceGetUtilizationRates")
        gpu = self._need(h.gpu.utilization_gpu_percent)
        memory = h.gpu.utilization_memory_percent
        return SimpleNamespace(gpu=int(gpu), memory=int(memory) if memory is not None else 0)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        return int(self._need(h.gpu.temperature_c))

    def nvmlDeviceGetEccMode(self, h: _Handle):
        self._enter("nvmlDeviceGetEccMode")
        mode = self._need(h.gpu.ecc_mode)
        on = 1 if mode == "Enabled" else 0
        return [on, on]

    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter_type: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors")
        value = h.gpu.ecc_errors_corrected if error_type == 0 else h.gpu.ecc_errors_uncorrected
        return self._need(value)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus")
        return int(self._need(h.gpu.retired_pages_pending))

    def _throttle(self, h: _Handle) -> int:
        reasons = self._need(h.gpu.throttle_reasons)
        mask = 0
        for name in reasons:
            mask |= _THROTTLE_BITS[name]
        return mask

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons")
        return self._throttle(h)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._throttle(h)

    def nvmlDeviceGetMigMode(self, h: _Handle):
        self._enter("nvmlDeviceGetMigMode")
        mig = self._need(h.gpu.mig)
        on = 1 if mig["enabled"] else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        mig = self._need(h.gpu.mig)
        # real GPUs have more slots than devices; the spare ones answer NOT_FOUND
        return 7 if mig["enabled"] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        devices = (h.gpu.mig or {}).get("devices", [])
        for dev in devices:
            if dev["index"] == index:
                return _Handle(h.gpu, mig=dev)
        raise NVMLError(NOT_FOUND)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return self._need((h.mig or {}).get("gpu_instance_id"))

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return self._need((h.mig or {}).get("compute_instance_id"))

    def nvmlDeviceGetComputeMode(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetComputeMode")
        return _COMPUTE_MODES[self._need(h.gpu.compute_mode)]

    def nvmlDeviceGetPersistenceMode(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetPersistenceMode")
        return 1 if self._need(h.gpu.persistence_mode) == "Enabled" else 0

    def nvmlDeviceGetCudaComputeCapability(self, h: _Handle):
        self._enter("nvmlDeviceGetCudaComputeCapability")
        major, minor = self._need(h.gpu.compute_capability).split(".")
        return int(major), int(minor)

    # -- processes: the raw structs, with NVML's "not available" sentinels -----------------

    def _procs(self, h: _Handle, kind: str, version: int):
        if h.mig is not None:
            return []  # the parent handle lists MIG processes with their GI/CI ids
        procs = self._need(h.gpu.processes)
        out = []
        for p in procs:
            if kind not in (p.type or "C"):
                continue
            info = SimpleNamespace(pid=p.pid, usedGpuMemory=(
                p.used_memory_bytes if p.used_memory_bytes is not None else NOT_AVAILABLE_ULL))
            if version >= 2:
                info.gpuInstanceId = p.gpu_instance_id if p.gpu_instance_id is not None else NOT_AVAILABLE_UINT
                info.computeInstanceId = (p.compute_instance_id if p.compute_instance_id is not None
                                          else NOT_AVAILABLE_UINT)
            out.append(info)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses_v3")
        return self._procs(h, "C", 3)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses_v2")
        return self._procs(h, "C", 2)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return self._procs(h, "C", 1)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h):
        self._enter("nvmlDeviceGetGraphicsRunningProcesses_v3")
        return self._procs(h, "G", 3)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h):
        self._enter("nvmlDeviceGetGraphicsRunningProcesses_v2")
        return self._procs(h, "G", 2)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        return self._procs(h, "G", 1)
