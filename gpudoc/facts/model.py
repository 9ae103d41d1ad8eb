"""The facts snapshot: frozen dataclasses that serialise to the SPEC's ``facts`` JSON and back.

Unknown values are ``None``; where a value is unknown for a reason worth telling (NVML said
NotSupported, the driver is too old, a file format does not carry it), the reason is kept in the
owner's ``unavailable`` map (field name -> reason) so renderers can say "N/A (not supported)".
"""

from __future__ import annotations

import collections.abc
import math
import re
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cached_property
from typing import Any, Mapping, Protocol

from gpudoc.jsonshape import field_types, is_union, shown

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
    # Whether the leader of its process group still runs (None: it leads its own group, or unknown):
    # an orphan in a live group shares it with processes that signalling the group would reach.
    group_leader_alive: bool | None = None
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
class DeviceOpener:
    pid: int
    bus_id: str | None  # the GPU whose device file it holds; None: the driver did not say which


@dataclass(frozen=True)
class DeviceUsers:
    """Processes with a GPU device file open, and how many processes' descriptors were unreadable
    (another user's: only root sees them)."""

    openers: tuple[DeviceOpener, ...] = ()
    unreadable: int = 0

    def holders_of(self, bus_id: str | None) -> tuple[int, ...]:
        """The PIDs holding this GPU's device file, with those holding a GPU the driver did not
        map (they may hold this one)."""
        key = normal_bus_id(bus_id)
        return tuple(dict.fromkeys(o.pid for o in self.openers if o.bus_id is None or o.bus_id == key))


def normal_bus_id(bus_id: str | None) -> str | None:
    """``00000000:17:00.0`` (NVML) and ``0000:17:00.0`` (the driver's /proc) as one spelling."""
    if not bus_id:
        return None
    match = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)", bus_id.strip())
    if not match:
        return bus_id.strip().lower()
    domain, bus, device, function = (int(part, 16) if part else 0 for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


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
    # Who has a GPU device file open: looked up only on this machine, when a GPU holds memory the
    # driver lists no process for and this is not a container (None: not looked).
    device_users: DeviceUsers | None = None

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
        """Inverse of ``to_dict``; accepts a whole ``check --json`` document too (reads ``facts``).
        Raises ``FactsFormatError`` naming the path of the first value of the wrong type."""
        where = ""
        if "facts" in data:
            data, where = data["facts"], "facts"
        return _from_jsonable(cls, data, where)


def _to_jsonable(value: Any) -> Any:
    if is_dataclass(value):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    return value


class FactsFormatError(ValueError):
    """Facts JSON that is not what ``to_dict`` writes: ``key`` is the path of the bad value
    (``gpus[0].memory_total_bytes``), the message says what was expected and what was found."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _from_jsonable(cls: Any, data: Any, where: str) -> Any:
    """Build ``cls`` from JSON, checking every value against the field's annotation: a snapshot is
    read from a file someone may have edited, and checks do arithmetic on what they are given."""
    if not isinstance(data, Mapping):
        raise FactsFormatError(where, f"expected an object, got {shown(data)}")
    hints = field_types(cls)
    kwargs = {}
    for f in fields(cls):
        key = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise FactsFormatError(key, "missing (every gpudoc facts document has it)")
            continue
        kwargs[f.name] = _from_value(hints[f.name], data[f.name], key)
    # Other keys (schema_version, keys of newer gpudoc versions) are left out.
    return cls(**kwargs)


def _from_value(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if is_union(hint):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]  # every optional field has one other type
        return _from_value(hint, value, where)
    if hint is Any:
        return value
    if value is None:
        raise FactsFormatError(where, f"expected {_spelled(hint)}, got null")
    if is_dataclass(hint):
        return _from_jsonable(hint, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise FactsFormatError(where, f"expected a list, got {shown(value)}")
        return tuple(_from_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if hint is dict:  # Gpu.mig, the one free-form object: checks read its keys, so they are checked too
        return _mig(value, where)
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, Mapping):
            raise FactsFormatError(where, f"expected an object, got {shown(value)}")
        return {str(k): _from_value(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if hint is int:  # True is an int to Python, not to a snapshot
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:  # JSON has one number type: 60 is a fine temperature
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return value
    elif isinstance(value, hint):
        return value
    raise FactsFormatError(where, f"expected {_spelled(hint)}, got {shown(value)}")


def _mig(value: Any, where: str) -> dict:
    if not isinstance(value, Mapping):
        raise FactsFormatError(where, f"expected an object or null, got {shown(value)}")
    out = dict(value)
    if "enabled" in value:
        out["enabled"] = _from_value(bool, value["enabled"], f"{where}.enabled")
    if "devices" in value:
        devices = value["devices"]
        if not isinstance(devices, list):
            raise FactsFormatError(f"{where}.devices", f"expected a list, got {shown(devices)}")
        for i, device in enumerate(devices):
            _from_jsonable(MigDevice, device, f"{where}.devices[{i}]")  # checked, kept as the dict it is
        out["devices"] = [dict(d) for d in devices]
    return out


def _spelled(hint: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object"}
    if hint in names:
        return names[hint]
    if typing.get_origin(hint) is tuple:
        return "a list"
    return "an object"


