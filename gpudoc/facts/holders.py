"""Who holds GPU memory, and what to do about each holder.

Pure: reads the facts snapshot only (the driver's process list plus /proc facts for each PID,
which already say which earlier gpudoc run owns a process). The kinds:

``orphan_of_run``  a process of an earlier gpudoc run whose launcher is gone or whose run ended
``own_live_job``   this user's process that still has its parent (a running job, a notebook)
``own_other``      this user's process re-parented to init or a subreaper: an orphan from a job
                   gpudoc did not launch
``other_user``     another user's process: never signalled; the remedy says whom to ask
``invisible``      memory held by a PID this PID namespace cannot see (containers), or memory in
                   use with no process listed where gpudoc could not look further
``unlisted``       memory in use with no process listed, on bare metal: gpudoc looked for the
                   processes with the GPU's device file open (``fuser -v /dev/nvidia*``); those it
                   found are holders of their own kind, marked ``via_device``
``zombie``         a dead process not yet reaped by its parent; the parent has to reap it
``unknown``        the facts came from a file of another machine: /proc facts do not apply
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpudoc.facts.model import DeviceUsers, Facts, Gpu, ProcessInfo
from gpudoc.units import GIB, format_bytes

KINDS = ("orphan_of_run", "own_live_job", "own_other", "other_user", "invisible", "unlisted", "zombie", "unknown")

# Memory a GPU shows as used with no process at all: driver/context reservations stay well under this.
UNACCOUNTED_THRESHOLD = GIB


@dataclass(frozen=True)
class GpuHolder:
    """Memory on one GPU and what holds it: a process (its /proc facts), or nothing visible."""

    pid: int | None  # None: memory in use with no visible process (container)
    gpu_index: int
    bytes: int | None
    kind: str
    process: ProcessInfo | None = None  # what /proc says about the PID (None: nothing it can see)
    run_id: str | None = None
    driver_name: str | None = None  # the name the driver reported (all there is without /proc)
    via_device: bool = False  # found holding the GPU's device file open, not in the driver's list
    looked: DeviceUsers | None = None  # "unlisted": what the look at the device files found
    bus_id: str | None = None  # "unlisted": the GPU's, to find its device file's holders
    container: bool | None = None  # no process listed: whether gpudoc runs in a container (None: unknown)

    @property
    def user(self) -> str | None:
        return self.process.user if self.process is not None else None

    @property
    def uid(self) -> int | None:
        return self.process.uid if self.process is not None else None

    @property
    def name(self) -> str | None:
        return (self.process.name if self.process is not None else None) or self.driver_name

    @property
    def cmdline(self) -> tuple[str, ...]:
        return tuple(self.process.cmdline) if self.process is not None else ()

    @property
    def ppid(self) -> int | None:
        return self.process.ppid if self.process is not None else None

    @property
    def pgid(self) -> int | None:
        return self.process.pgid if self.process is not None else None

    @property
    def create_time(self) -> float | None:
        return self.process.create_time if self.process is not None else None

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
        if self.via_device and self.own:
            # Not in the driver's list: gpudoc clean leaves it alone (a monitor holds the file too).
            return f"kill -TERM {self.pid}  # it holds the GPU open; make sure it is not a monitor (nvtop, DCGM)"
        if self.kind == "unlisted":
            return self._unlisted_remedy()
        if self.kind == "orphan_of_run":
            return f"gpudoc clean --gpus {self.gpu_index}"
        if self.kind == "own_other":
            # The whole group (a dead launcher's workers) only when its leader is gone too: a group
            # whose leader runs on (a shell, a supervisor) holds live processes the signal would reach.
            leader_gone = self.process is not None and self.process.group_leader_alive is False
            group = (f"kill -TERM -{self.pgid}" if self.pgid and self.pgid != self.pid and leader_gone
                     else f"kill -TERM {self.pid}")
            return f"gpudoc clean --gpus {self.gpu_index}  # or: {group}"
        if self.kind == "own_live_job":
            if self.run_id:
                return (f"stop gpudoc run {self.run_id} where it runs (Ctrl-C), or: kill -TERM {self.pid}  "
                        f"# a live job: gpudoc clean leaves it running")
            return f"kill -TERM {self.pid}  # your live process: gpudoc clean leaves it running"
        if self.kind == "other_user":
            return (f"ask {self.user or 'its owner'} to stop PID {self.pid} (gpudoc never kills another "
                    f"user's process), or use other GPUs: export CUDA_VISIBLE_DEVICES=<free GPUs>")
        if self.kind == "zombie":
            if self.ppid and self.ppid > 1:
                return f"kill -TERM {self.ppid}  # the parent that has not reaped it"
            return f"sudo nvidia-smi --gpu-reset -i {self.gpu_index}  # nothing left to signal; or reboot"
        if self.kind == "invisible":
            if self.pid is None and self.container is None:
                return (f"nvidia-smi -i {self.gpu_index} on the host if this is a container; "
                        f"on bare metal: sudo fuser -v /dev/nvidia*")
            if self.pid is None:
                return f"on the host, outside this container: nvidia-smi -i {self.gpu_index}  # then stop the PIDs it lists"
            return f"on the host, outside this container: ps -o user,pid,cmd -p {self.pid}, then kill -TERM {self.pid}"
        return f"on that machine: ps -o user,pid,ppid,cmd -p {self.pid}"

    def _unlisted_remedy(self) -> str:
        if self.looked is None:
            return "sudo fuser -v /dev/nvidia*  # who has the GPU open"
        if self.looked.holders_of(self.bus_id):
            return "stop the processes listed as holding the GPU open, then check again"
        if self.looked.unreadable:
            return (f"sudo fuser -v /dev/nvidia*  # {self.looked.unreadable} other users' processes "
                    f"need root to see")
        return (f"sudo nvidia-smi --gpu-reset -i {self.gpu_index}  # no process here has the GPU open; "
                f"or reboot")

    def describe(self) -> str:
        size = format_bytes(self.bytes) if self.bytes is not None else "N/A"
        text = {
            "orphan_of_run": f"left over from gpudoc run {self.run_id}",
            "own_live_job": "your live process" + (f" (gpudoc run {self.run_id})" if self.run_id else ""),
            "own_other": "your orphaned process (its parent is gone)",
            "other_user": f"{self.user or 'another user'}'s process",
            "invisible": "not visible from this PID namespace (container)" if self.pid is not None
            else "memory in use, but no process is listed (held from outside this container)" if self.container
            else "memory in use, but no process is listed",
            "unlisted": self._unlisted_text(),
            "zombie": "a zombie: dead, not reaped by its parent",
            "unknown": "owner unknown (facts read from a file)",
        }[self.kind]
        if self.via_device:
            text += "; it has the GPU's device file open, though the driver lists no process"
        return f"GPU {self.gpu_index}: {self.label} holds {size}: {text}"

    def _unlisted_text(self) -> str:
        found = self.looked.holders_of(self.bus_id) if self.looked is not None else ()
        if found:
            pids = ", ".join(str(p) for p in found)
            return f"memory in use, no process listed by the driver; PID {pids} has the GPU's device file open"
        if self.looked is not None and self.looked.unreadable:
            return ("memory in use, no process listed by the driver, and none of the processes this user "
                    "may see has the GPU open")
        if self.looked is not None:
            return "memory in use, no process listed by the driver, and no process on this machine has the GPU open"
        return "memory in use, no process listed by the driver"

    def to_dict(self) -> dict:
        return {
            "pid": self.pid, "gpu_index": self.gpu_index, "bytes": self.bytes, "kind": self.kind,
            "run_id": self.run_id, "user": self.user, "name": self.name,
        }


def classify_process(info: ProcessInfo | None, *, pid: int, gpu_index: int, used: int | None,
                     facts: Facts, driver_name: str | None = None) -> GpuHolder:
    """``driver_name`` is the process name the driver reported: the only name there is when /proc
    cannot see the PID (another namespace, a saved nvidia-smi file)."""
    def holder(kind: str, run_id: str | None = None) -> GpuHolder:
        return GpuHolder(pid, gpu_index, used, kind, info, run_id, driver_name)

    if info is None:
        return holder("unknown" if facts.source.startswith("snapshot") else "invisible")
    if not info.visible:
        return holder("invisible")
    if info.zombie or info.status == "zombie":
        return holder("zombie")
    my_uid = facts.host.uid if facts.host else None
    if info.uid is not None and my_uid is not None and info.uid != my_uid:
        return holder("other_user")
    if info.gpudoc_run_id is not None:
        # A run that has not ended still owns its processes, unless they lost their parent.
        live = info.gpudoc_run_live is not False and not info.orphaned
        return holder("own_live_job" if live else "orphan_of_run", info.gpudoc_run_id)
    return holder("own_other" if info.orphaned else "own_live_job")


def unlisted_bytes(gpu: Gpu) -> int | None:
    """Memory in use on a GPU whose driver lists no process at all (None: none, or too little to matter)."""
    if gpu.processes is None or gpu.memory_used_bytes is None:
        return None
    if gpu.processes:
        # The driver lists owners (on Windows/WDDM without their sizes): the rest is its own reservation.
        return None
    extra = gpu.memory_used_bytes
    return extra if extra >= UNACCOUNTED_THRESHOLD else None


def classify_gpu_processes(facts: Facts, *, gpus: Iterable[int] | None = None) -> list[GpuHolder]:
    """Every holder of GPU memory on the given GPUs (all when None), largest first per GPU."""
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
                                            used=proc.used_memory_bytes, facts=facts, driver_name=proc.name))
        extra = unlisted_bytes(gpu)
        if extra is not None:
            holders.extend(_unlisted(facts, gpu, extra))
        holders.sort(key=lambda h: -(h.bytes or 0))
        out.extend(holders)
    return out



def _unlisted(facts: Facts, gpu: Gpu, used: int) -> list[GpuHolder]:
    """Memory no listed process holds: in a container, the host must look; on bare metal, the
    processes holding the GPU's device file (each a holder of its kind) and the memory itself."""
    container = facts.host.in_container if facts.host else None
    if container is not False:
        return [GpuHolder(None, gpu.index, used, "invisible", container=container)]
    users = facts.device_users
    openers = [replace(classify_process(facts.process(pid), pid=pid, gpu_index=gpu.index, used=None, facts=facts),
                       via_device=True)
               for pid in (users.holders_of(gpu.bus_id) if users is not None else ())]
    return [GpuHolder(None, gpu.index, used, "unlisted", looked=users, bus_id=gpu.bus_id, container=False), *openers]
