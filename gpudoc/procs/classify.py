"""Who holds GPU memory, and what to do about each holder.

Pure: reads the facts snapshot (the driver's process list plus /proc facts for each PID) and the
run records of earlier gpudoc runs. The kinds:

``orphan_of_run``  a process of an earlier gpudoc run whose launcher is gone or whose run ended
``own_live_job``   this user's process that still has its parent (a running job, a notebook)
``own_other``      this user's process re-parented to init or a subreaper: an orphan from a job
                   gpudoc did not launch
``other_user``     another user's process: never signalled; the remedy says whom to ask
``invisible``      memory held by a PID this PID namespace cannot see (containers), or memory in
                   use with no process listed at all
``zombie``         a dead process not yet reaped by its parent; the parent has to reap it
``unknown``        the facts came from a file of another machine: /proc facts do not apply
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from gpudoc.facts.model import Facts, Gpu, ProcessInfo
from gpudoc.units import GIB, format_bytes

KINDS = ("orphan_of_run", "own_live_job", "own_other", "other_user", "invisible", "zombie", "unknown")

# Memory a GPU shows as used with no process at all: driver/context reservations stay well under this.
UNACCOUNTED_THRESHOLD = GIB
# A recorded create_time matches a live process within this (psutil reports 10 ms resolution).
CREATE_TIME_SLACK_S = 0.05


@dataclass(frozen=True)
class GpuHolder:
    pid: int | None  # None: memory in use with no visible process (container)
    gpu_index: int
    bytes: int | None
    kind: str
    run_id: str | None = None
    user: str | None = None
    uid: int | None = None
    name: str | None = None
    cmdline: tuple[str, ...] = ()
    ppid: int | None = None
    pgid: int | None = None
    create_time: float | None = None

    @property
    def own(self) -> bool:
        return self.kind in ("orphan_of_run", "own_live_job", "own_other")

    @property
    def label(self) -> str:
        what = self.name or (self.cmdline[0] if self.cmdline else None) or "?"
        who = f", user {self.user}" if self.user else ""
        return f"PID {self.pid} ({what}{who})" if self.pid is not None else "no visible process"

    def remedy(self) -> str:
        """The exact command for this holder (another user's process: whom to ask, never kill)."""
        if self.kind == "orphan_of_run":
            return f"gpudoc clean --gpus {self.gpu_index}"
        if self.kind == "own_other":
            group = f"kill -TERM -{self.pgid}" if self.pgid and self.pgid != self.pid else f"kill -TERM {self.pid}"
            return f"gpudoc clean --gpus {self.gpu_index}  # or: {group}"
        if self.kind == "own_live_job":
            return f"kill -TERM {self.pid}  # your running job; or: gpudoc clean --gpus {self.gpu_index}"
        if self.kind == "other_user":
            return (f"ask {self.user or 'its owner'} to stop PID {self.pid} (gpudoc never kills another "
                    f"user's process), or use other GPUs: export CUDA_VISIBLE_DEVICES=<free GPUs>")
        if self.kind == "zombie":
            if self.ppid and self.ppid > 1:
                return f"kill -TERM {self.ppid}  # the parent that has not reaped it"
            return f"sudo nvidia-smi --gpu-reset -i {self.gpu_index}  # nothing left to signal; or reboot"
        if self.kind == "invisible":
            if self.pid is None:
                return f"on the host, outside this container: nvidia-smi -i {self.gpu_index}  # then stop the PIDs it lists"
            return f"on the host, outside this container: ps -o user,pid,cmd -p {self.pid}, then kill -TERM {self.pid}"
        return f"on that machine: ps -o user,pid,ppid,cmd -p {self.pid}"

    def describe(self) -> str:
        size = format_bytes(self.bytes) if self.bytes is not None else "N/A"
        text = {
            "orphan_of_run": f"left over from gpudoc run {self.run_id}",
            "own_live_job": "your live process" + (f" (gpudoc run {self.run_id})" if self.run_id else ""),
            "own_other": "your orphaned process (its parent is gone)",
            "other_user": f"{self.user or 'another user'}'s process",
            "invisible": "not visible from this PID namespace (container)" if self.pid is not None
            else "memory in use, but no process is listed (held from outside this container)",
            "zombie": "a zombie: dead, not reaped by its parent",
            "unknown": "owner unknown (facts read from a file)",
        }[self.kind]
        return f"GPU {self.gpu_index}: {self.label} holds {size}: {text}"

    def to_dict(self) -> dict:
        return {
            "pid": self.pid, "gpu_index": self.gpu_index, "bytes": self.bytes, "kind": self.kind,
            "run_id": self.run_id, "user": self.user, "name": self.name,
        }


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def _records(runs: Any) -> list:
    if runs is None:
        return []
    if hasattr(runs, "records"):
        return list(runs.records())
    return list(runs)


def match_run(info: ProcessInfo, records: Iterable) -> Any:
    """The run record this process belongs to: a recorded (pid, create_time), or the run's process
    group with a create time inside the run's lifetime (a reused PGID is not a match)."""
    for record in records:
        for entry in record.pids or ():
            if entry.get("pid") == info.pid:
                recorded = entry.get("create_time")
                if recorded is None or info.create_time is None:
                    continue
                if abs(float(recorded) - info.create_time) <= CREATE_TIME_SLACK_S:
                    return record
        if record.process_group and info.pgid == record.process_group and info.create_time is not None:
            start = _epoch(record.started_at)
            end = _epoch(record.ended_at)
            if start is not None and info.create_time + 1 >= start and (end is None or info.create_time <= end + 1):
                return record
    return None


def classify_process(info: ProcessInfo | None, *, pid: int, gpu_index: int, used: int | None,
                     facts: Facts, records: list, driver_name: str | None = None) -> GpuHolder:
    """``driver_name`` is the process name the driver reported: the only name there is when /proc
    cannot see the PID (another namespace, a saved nvidia-smi file)."""
    if info is None:
        kind = "unknown" if facts.source.startswith("snapshot") else "invisible"
        return GpuHolder(pid, gpu_index, used, kind, name=driver_name)
    common = dict(user=info.user, uid=info.uid, name=info.name or driver_name, cmdline=tuple(info.cmdline), ppid=info.ppid,
                  pgid=info.pgid, create_time=info.create_time)
    if not info.visible:
        return GpuHolder(pid, gpu_index, used, "invisible", **common)
    if info.zombie or info.status == "zombie":
        return GpuHolder(pid, gpu_index, used, "zombie", **common)
    my_uid = facts.host.uid if facts.host else None
    if info.uid is not None and my_uid is not None and info.uid != my_uid:
        return GpuHolder(pid, gpu_index, used, "other_user", **common)
    record = match_run(info, records)
    run_id = record.id if record is not None else info.gpudoc_run_id
    if run_id is not None:
        live = record is not None and record.status == "running" and record.ended_at is None
        if record is None:
            live = not info.orphaned
        kind = "own_live_job" if live and not info.orphaned else "orphan_of_run"
        return GpuHolder(pid, gpu_index, used, kind, run_id=run_id, **common)
    if info.orphaned:
        return GpuHolder(pid, gpu_index, used, "own_other", **common)
    return GpuHolder(pid, gpu_index, used, "own_live_job", **common)


def _unaccounted(gpu: Gpu) -> int | None:
    if gpu.processes is None or gpu.memory_used_bytes is None:
        return None
    if gpu.processes:
        # The driver lists owners (on Windows/WDDM without their sizes): the rest is its own reservation.
        return None
    extra = gpu.memory_used_bytes
    return extra if extra >= UNACCOUNTED_THRESHOLD else None


def classify_gpu_processes(facts: Facts, runs: Any = None, *, gpus: Iterable[int] | None = None) -> list[GpuHolder]:
    """Every holder of GPU memory on the given GPUs (all when None), largest first per GPU."""
    records = _records(runs)
    wanted = set(gpus) if gpus is not None else None
    out: list[GpuHolder] = []
    for gpu in sorted(facts.gpus, key=lambda g: g.index):
        if wanted is not None and gpu.index not in wanted:
            continue
        holders = []
        for proc in gpu.processes or ():
            if not proc.pid:
                continue
            holders.append(classify_process(facts.process(proc.pid), pid=proc.pid, gpu_index=gpu.index,
                                            used=proc.used_memory_bytes, facts=facts, records=records,
                                            driver_name=proc.name))
        extra = _unaccounted(gpu)
        if extra is not None:
            holders.append(GpuHolder(None, gpu.index, extra, "invisible"))
        holders.sort(key=lambda h: -(h.bytes or 0))
        out.extend(holders)
    return out

