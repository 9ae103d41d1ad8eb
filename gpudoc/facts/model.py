"""The facts snapshot: frozen dataclasses that serialise to the SPEC's ``facts`` JSON and back.

Unknown values are ``None``; where a value is unknown for a reason worth telling (NVML said
NotSupported, the driver is too old, a file format does not carry it), the reason is kept in the
owner's ``unavailable`` map (field name -> reason) so renderers can say "N/A (not supported)".
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any, Mapping, Protocol

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GpuProcess:
    """A process that holds memory on a GPU, as the driver reports it (PIDs are the driver's view)."""

    pid: int
    used_memory_bytes: int | None = None
    name: str | None = None
    type: str | None = None  # "C" compute, "G" graphics, "C+G"
    gpu_instance_id: int | None = None  # MIG
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class MigDevice:
    index: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    temperature_c: float | None = None
    ecc_mode: str | None = None  # "Enabled" / "Disabled"
    ecc_errors_corrected: int | None = None  # volatile, since the last driver load
    ecc_errors_uncorrected: int | None = None
    retired_pages_pending: bool | None = None
    throttle_reasons: tuple[str, ...] | None = None  # active reasons, e.g. ("hw_thermal_slowdown",)
    mig: dict | None = None  # {"enabled": bool, "devices": [MigDevice as dict]} or None when unknown
    compute_mode: str | None = None  # "Default", "Exclusive_Process", "Prohibited"
    persistence_mode: str | None = None  # "Enabled" / "Disabled"
    compute_capability: str | None = None  # "8.0"
    processes: tuple[GpuProcess, ...] | None = None  # None = the source cannot list processes
    unavailable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessInfo:
    """What /proc says about a PID the driver reported (or a process of an earlier gpudoc run)."""

    pid: int
    visible: bool  # False: the PID is not in this PID namespace (containers) or has vanished
    user: str | None = None
    uid: int | None = None
    name: str | None = None
    cmdline: tuple[str, ...] = ()
    ppid: int | None = None
    pgid: int | None = None
    create_time: float | None = None
    status: str | None = None  # psutil status: "running", "sleeping", "zombie", ...
    zombie: bool = False
    orphaned: bool = False  # re-parented to init or a subreaper: its launcher is gone
    gpudoc_run_id: str | None = None  # set when the PID belongs to an earlier gpudoc run
    gpudoc_run_live: bool | None = None  # that run has not ended


class RunOwnerIndex(Protocol):
    """Which earlier gpudoc run a process belongs to (``gpudoc.runs.owners.RunOwners``)."""

    def owner(self, pid: int, create_time: float | None, pgid: int | None) -> RunOwner | None: ...


class RunOwner(Protocol):
    @property
    def run_id(self) -> str: ...

    @property
    def live(self) -> bool: ...


@dataclass(frozen=True)
class HostFacts:
    hostname: str | None = None
    user: str | None = None
    uid: int | None = None
    cpu_count: int | None = None  # logical CPUs usable by this process (affinity, cgroup quota)
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    shm_total_bytes: int | None = None
    shm_free_bytes: int | None = None
    runs_dir: str | None = None  # where run records are written
    runs_dir_free_bytes: int | None = None
    in_container: bool | None = None
    unavailable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TorchFacts:
    """What the target interpreter says about its torch (``check --deep``), from a subprocess."""

    python: str
    ok: bool
    error: str | None = None
    torch_version: str | None = None
    cuda_build: str | None = None  # torch.version.cuda, None for CPU builds
    hip_build: str | None = None
    cuda_available: bool | None = None
    device_count: int | None = None
    alloc_env_name: str | None = None  # the allocator variable this torch reads
    alloc_settings_effective: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Facts:
    """One immutable snapshot. ``nvml_error`` is set when GPU facts could not be read at all."""

    collected_at: str
    source: str  # "nvml", "snapshot:<file>[,<file>]", "none"
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.2": the newest CUDA the driver supports
    nvml_version: str | None = None
    nvml_error: str | None = None
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()  # /proc facts for every PID seen on a GPU
    env: Mapping[str, str] = field(default_factory=dict)  # only the variables gpudoc cares about
    host: HostFacts = field(default_factory=HostFacts)
    torch: TorchFacts | None = None

    def process(self, pid: int) -> ProcessInfo | None:
        return self._processes_by_pid.get(pid)

    @cached_property
    def _processes_by_pid(self) -> dict[int, ProcessInfo]:
        # Asked once per GPU process by every check: a dictionary keeps `check` linear in them.
        return {p.pid: p for p in reversed(self.processes)}  # the first entry wins, as a scan would

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, **_to_jsonable(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Facts:
        """Inverse of ``to_dict``; accepts a whole ``check --json`` document too (reads ``facts``)."""
        if "facts" in data and isinstance(data["facts"], Mapping):
            data = data["facts"]
        return _from_jsonable(cls, data)


def _to_jsonable(value: Any) -> Any:
    if is_dataclass(value):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    return value


_NESTED = {
    ("Facts", "gpus"): Gpu,
    ("Facts", "processes"): ProcessInfo,
    ("Facts", "host"): HostFacts,
    ("Facts", "torch"): TorchFacts,
    ("Gpu", "processes"): GpuProcess,
}


def _from_jsonable(cls: Any, data: Mapping[str, Any]) -> Any:
    kwargs = {}
    names = {f.name for f in fields(cls)}
    for key, value in data.items():
        if key not in names:
            continue  # schema_version and keys from newer gpudoc versions
        nested = _NESTED.get((cls.__name__, key))
        if nested is not None and value is not None:
            if isinstance(value, list):
                value = tuple(_from_jsonable(nested, v) for v in value)
            else:
                value = _from_jsonable(nested, value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)
