"""GPU facts from NVML. The only module in gpudoc that imports ``pynvml`` (package nvidia-ml-py).

Modelled on nvitop's ``libnvml``: NVML is loaded lazily, every query goes through one helper that
turns "this GPU/driver cannot tell" into ``None`` plus a reason, and functions that older drivers
lack fall back to their older versions. Nothing here raises for a missing driver: ``read_gpus``
returns the reason as a string instead, and ``gpudoc check`` turns it into a finding.

The backend is a seam: anything with pynvml's function names and an ``NVMLError`` exception class
whose instances carry the NVML return code in ``.value``. The default is the pynvml module itself;
tests pass a fake fed by real nvidia-smi captures.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from gpudoc.facts.model import Gpu, GpuProcess, MigDevice

# NVML return codes (nvml.h); stable across driver releases.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

# What NVML puts in a process's usedGpuMemory when it cannot tell (WDDM, some containers).
NVML_VALUE_NOT_AVAILABLE_ULL = 2**64 - 1
# What v2/v3 process structs put in gpuInstanceId/computeInstanceId outside MIG.
NVML_VALUE_NOT_AVAILABLE_UINT = 2**32 - 1

_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
_THROTTLE_BITS = {
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


class NvmlBackend(Protocol):
    """The part of pynvml's surface that gpudoc uses (functions are looked up by name)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Active clock event reasons, without ``gpu_idle`` (the normal state of an idle GPU)."""
    return tuple(name for bit, name in _THROTTLE_BITS.items() if mask & bit)


def format_cuda_version(value: int) -> str:
    """NVML's 12020 -> ``"12.2"``."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _load_default_backend() -> tuple[Any | None, str | None]:
    try:
        import pynvml  # lazy on purpose: `gpudoc --help` must not pay for it
    except ImportError as exc:
        return None, f"nvidia-ml-py is not installed ({exc}): pip install nvidia-ml-py"
    return pynvml, None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


def init_error_message(exc: BaseException) -> str:
    """One line for why NVML could not start."""
    code = _code(exc)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (NVML: Driver Not Loaded; is the nvidia kernel module loaded?)"
    if code == NVML_ERROR_NO_PERMISSION:
        return "no permission to talk to the NVIDIA driver (check access to /dev/nvidia*)"
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return ("NVIDIA driver/library version mismatch (the driver was upgraded without a reboot: "
                "reboot or reload the nvidia kernel modules)")
    return f"NVML could not start: {exc}"


class _Query:
    """Calls into the backend; a value NVML cannot give becomes None plus a reason."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.error_type = getattr(nv, "NVMLError", Exception)

    def call(self, names: tuple[str, ...] | str, *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
        """Try each function name in turn (newest first); return (value, None) or (None, reason)."""
        if isinstance(names, str):
            names = (names,)
        missing = []
        for name in names:
            fn: Callable | None = getattr(self.nv, name, None)
            if fn is None:
                missing.append(name)
                continue
            try:
                return fn(*args, **kwargs), None
            except self.error_type as exc:
                code = _code(exc)
                if code == NVML_ERROR_FUNCTION_NOT_FOUND:
                    missing.append(name)
                    continue
                if code == NVML_ERROR_NOT_SUPPORTED:
                    return None, "not supported on this GPU/driver"
                if code == NVML_ERROR_NO_PERMISSION:
                    return None, "no permission (NVML)"
                if code == NVML_ERROR_GPU_IS_LOST:
                    return None, "GPU is lost (NVML): the GPU fell off the bus; reboot the machine"
                return None, f"NVML error: {exc}"
            except Exception as exc:  # a binding bug must not take the whole check down
                return None, f"NVML call {name} failed: {exc}"
        return None, f"driver too old (no {', '.join(missing)})"


def read_gpus(backend: Any | None = None) -> tuple[str | None, str | None, str | None, tuple[Gpu, ...], str | None]:
    """``(driver_version, cuda_driver_version, nvml_version, gpus, error)``; never raises.

    ``error`` is set (and ``gpus`` empty) when NVML cannot be used at all: no library, no
    driver, no permission.
    """
    if backend is None:
        backend, error = _load_default_backend()
        if backend is None:
            return None, None, None, (), error
    error_type = getattr(backend, "NVMLError", Exception)
    try:
        backend.nvmlInit()
    except error_type as exc:
        return None, None, None, (), init_error_message(exc)
    except Exception as exc:  # e.g. OSError from a broken library
        return None, None, None, (), f"NVML could not start: {exc}"
    try:
        return _read_initialised(_Query(backend))
    finally:
        try:
            backend.nvmlShutdown()
        except Exception:
            pass  # nothing useful to do: the facts are already read


def _read_initialised(q: _Query) -> tuple[str | None, str | None, str | None, tuple[Gpu, ...], str | None]:
    driver, _ = q.call("nvmlSystemGetDriverVersion")
    cuda, _ = q.call(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
    nvml_version, _ = q.call("nvmlSystemGetNVMLVersion")
    count, reason = q.call("nvmlDeviceGetCount")
    if count is None:
        return (_text(driver) if driver is not None else None, None, None, (),
                f"NVML cannot count GPUs: {reason}")
    gpus = tuple(_read_gpu(q, index) for index in range(int(count)))
    return (
        _text(driver) if driver is not None else None,
        format_cuda_version(int(cuda)) if cuda is not None else None,
        _text(nvml_version) if nvml_version is not None else None,
        gpus,
        None,
    )


def _read_gpu(q: _Query, index: int) -> Gpu:
    unavailable: dict[str, str] = {}
    handle, reason = q.call("nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        for name in Gpu.__dataclass_fields__:
            if name not in ("index", "unavailable"):
                unavailable[name] = f"no handle for GPU {index}: {reason}"
        return Gpu(index=index, unavailable=unavailable)

    values: dict[str, Any] = {}

    def put(field: str, value: Any, why: str | None) -> None:
        values[field] = value
        if value is None:
            unavailable[field] = why or "unknown"

    name, why = q.call("nvmlDeviceGetName", handle)
    put("name", _text(name) if name is not None else None, why)
    uuid, why = q.call("nvmlDeviceGetUUID", handle)
    put("uuid", _text(uuid) if uuid is not None else None, why)
    pci, why = q.call("nvmlDeviceGetPciInfo", handle)
    bus = getattr(pci, "busId", None) if pci is not None else None
    put("bus_id", _text(bus) if bus is not None else None, why or "no bus id")

    memory, why = _memory(q, handle)
    put("memory_total_bytes", getattr(memory, "total", None), why)
    put("memory_used_bytes", getattr(memory, "used", None), why)
    put("memory_free_bytes", getattr(memory, "free", None), why)

    util, why = q.call("nvmlDeviceGetUtilizationRates", handle)
    put("utilization_gpu_percent", float(util.gpu) if util is not None else None, why)
    put("utilization_memory_percent", float(util.memory) if util is not None else None, why)
    temp, why = q.call("nvmlDeviceGetTemperature", handle, 0)  # NVML_TEMPERATURE_GPU
    put("temperature_c", float(temp) if temp is not None else None, why)

    ecc, why = q.call("nvmlDeviceGetEccMode", handle)
    put("ecc_mode", ("Enabled" if ecc[0] else "Disabled") if ecc is not None else None, why)
    # 0/1 = corrected/uncorrected, 0 = volatile counter (since the driver loaded)
    corrected, why = q.call("nvmlDeviceGetTotalEccErrors", handle, 0, 0)
    put("ecc_errors_corrected", int(corrected) if corrected is not None else None, why)
    uncorrected, why = q.call("nvmlDeviceGetTotalEccErrors", handle, 1, 0)
    put("ecc_errors_uncorrected", int(uncorrected) if uncorrected is not None else None, why)
    pending, why = q.call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    put("retired_pages_pending", bool(pending) if pending is not None else None, why)

    mask, why = q.call(("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                       handle)
    put("throttle_reasons", decode_throttle_reasons(int(mask)) if mask is not None else None, why)

    mig, why, mig_handles = _mig(q, handle)
    put("mig", mig, why)
    mode, why = q.call("nvmlDeviceGetComputeMode", handle)
    put("compute_mode", _COMPUTE_MODES.get(int(mode), str(mode)) if mode is not None else None, why)
    persistence, why = q.call("nvmlDeviceGetPersistenceMode", handle)
    put("persistence_mode", ("Enabled" if persistence else "Disabled") if persistence is not None else None, why)
    cap, why = q.call("nvmlDeviceGetCudaComputeCapability", handle)
    put("compute_capability", f"{cap[0]}.{cap[1]}" if cap is not None else None, why)

    procs, why = _processes(q, handle, mig_handles)
    put("processes", procs, why)
    return Gpu(index=index, **values, unavailable=unavailable)


def _memory(q: _Query, handle: Any) -> tuple[Any, str | None]:
    # v2 reports "used" without the driver's reservation, as nvidia-smi shows it.
    version = getattr(q.nv, "nvmlMemory_v2", None)
    if version is not None:
        memory, _why = q.call("nvmlDeviceGetMemoryInfo", handle, version=version)
        if memory is not None:
            return memory, None
    return q.call("nvmlDeviceGetMemoryInfo", handle)


def _mig(q: _Query, handle: Any) -> tuple[dict | None, str | None, list]:
    modes, why = q.call("nvmlDeviceGetMigMode", handle)
    if modes is None:
        return None, why, []
    enabled = bool(modes[0])
    devices: list[dict] = []
    handles: list = []
    if enabled:
        count, _ = q.call("nvmlDeviceGetMaxMigDeviceCount", handle)
        for slot in range(int(count or 0)):
            mig_handle, _ = q.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig_handle is None:
                continue  # an empty slot answers NOT_FOUND
            handles.append(mig_handle)
            memory, _ = q.call("nvmlDeviceGetMemoryInfo", mig_handle)
            uuid, _ = q.call("nvmlDeviceGetUUID", mig_handle)
            gi, _ = q.call("nvmlDeviceGetGpuInstanceId", mig_handle)
            ci, _ = q.call("nvmlDeviceGetComputeInstanceId", mig_handle)
            dev = MigDevice(
                index=slot,
                gpu_instance_id=gi,
                compute_instance_id=ci,
                memory_total_bytes=getattr(memory, "total", None),
                memory_used_bytes=getattr(memory, "used", None),
                memory_free_bytes=getattr(memory, "free", None),
                uuid=_text(uuid) if uuid is not None else None,
            )
            devices.append({k: getattr(dev, k) for k in dev.__dataclass_fields__})
    return {"enabled": enabled, "devices": devices}, None, handles


_COMPUTE_FNS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses")
_GRAPHICS_FNS = ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                 "nvmlDeviceGetGraphicsRunningProcesses")


def _id_or_none(value: Any) -> int | None:
    if value is None or value == NVML_VALUE_NOT_AVAILABLE_UINT:
        return None
    return int(value)


def _processes(q: _Query, handle: Any, mig_handles: list) -> tuple[tuple[GpuProcess, ...] | None, str | None]:
    found: dict[int, GpuProcess] = {}
    reasons = []
    answered = False
    for kind, fns in (("C", _COMPUTE_FNS), ("G", _GRAPHICS_FNS)):
        # Under MIG a process shows up on its MIG device; the parent may list it too.
        for h in [handle, *mig_handles]:
            infos, why = q.call(fns, h)
            if infos is None:
                if h is handle:
                    reasons.append(f"{'compute' if kind == 'C' else 'graphics'} processes: {why}")
                continue
            answered = True
            for info in infos:
                pid = int(info.pid)
                used = getattr(info, "usedGpuMemory", None)
                if used is not None and int(used) >= NVML_VALUE_NOT_AVAILABLE_ULL:
                    used = None
                old = found.get(pid)
                if old is not None:
                    kinds = set((old.type or kind).split("+")) | {kind}
                    found[pid] = GpuProcess(
                        pid=pid,
                        used_memory_bytes=old.used_memory_bytes if old.used_memory_bytes is not None else used,
                        type="C+G" if kinds == {"C", "G"} else kind,
                        gpu_instance_id=old.gpu_instance_id,
                        compute_instance_id=old.compute_instance_id,
                    )
                    continue
                found[pid] = GpuProcess(
                    pid=pid,
                    used_memory_bytes=int(used) if used is not None else None,
                    type=kind,
                    gpu_instance_id=_id_or_none(getattr(info, "gpuInstanceId", None)),
                    compute_instance_id=_id_or_none(getattr(info, "computeInstanceId", None)),
                )
    if not answered:
        return None, "; ".join(reasons) or "unknown"
    named = []
    for proc in found.values():
        name, _ = q.call("nvmlSystemGetProcessName", proc.pid)
        named.append(GpuProcess(
            pid=proc.pid,
            used_memory_bytes=proc.used_memory_bytes,
            name=_text(name) if name else None,
            type=proc.type,
            gpu_instance_id=proc.gpu_instance_id,
            compute_instance_id=proc.compute_instance_id,
        ))
    return tuple(named), None


class Session:
    """A long-lived NVML session for the launcher's once-a-second samples.

    ``read_gpus`` starts NVML, reads and shuts it down: right for one ``gpudoc check``, wasteful
    43,200 times over a 12-hour job. A session starts NVML once; calling it reads the same facts
    as ``read_gpus``; ``close()`` shuts NVML down.
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._query = _Query(backend)

    @classmethod
    def open(cls, backend: Any | None = None) -> Session | None:
        """None when NVML cannot be used (no driver here): sampling is then simply skipped."""
        if backend is None:
            backend, _ = _load_default_backend()
            if backend is None:
                return None
        try:
            backend.nvmlInit()
        except Exception:
            return None
        return cls(backend)

    def __call__(self) -> tuple[str | None, str | None, str | None, tuple[Gpu, ...], str | None]:
        return _read_initialised(self._query)

    def close(self) -> None:
        try:
            self._backend.nvmlShutdown()
        except Exception:
            pass  # shutting down is best effort: the process ends soon anyway
