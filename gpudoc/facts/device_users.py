"""Who has a GPU's device file open, for memory the driver lists no process for.

The driver's process list can be empty while memory is held: a process in another PID namespace, a
context the driver does not report, or a process that holds ``/dev/nvidiaN`` open after a crash.
On bare metal the community's answer is ``fuser -v /dev/nvidia*``; this is the same look, in
Python: every ``/proc/PID/fd`` this user may read, each descriptor's target compared with the
GPU device files. Another user's descriptors need root: the scan says how many it could not read,
so the remedy can say when only ``sudo fuser`` will see them.

``/dev/nvidiaN`` is the GPU whose minor number is N; the driver says which bus id that is in
``/proc/driver/nvidia/gpus/BUS/information`` ("Device Minor: N"). ``nvidiactl`` and ``nvidia-uvm``
are opened by every CUDA process and name no GPU; they are not counted.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpudoc.facts.model import DeviceOpener, DeviceUsers, normal_bus_id

PROC = Path("/proc")
DEV = Path("/dev")
_GPU_DEVICE = re.compile(r"nvidia(\d+)")
_MINOR = re.compile(r"^Device Minor:\s*(\d+)", re.MULTILINE)


def device_users(*, proc: Path | None = None, dev: Path | None = None, exclude: int | None = None) -> DeviceUsers:
    """Scan every process's open descriptors for ``dev/nvidiaN``. ``exclude``: a PID not to count (gpudoc)."""
    proc, dev = proc or PROC, dev or DEV
    minors = _bus_by_minor(proc / "driver" / "nvidia" / "gpus")
    found: list[DeviceOpener] = []
    unreadable = 0
    prefix = str(dev).rstrip("/") + "/"
    for entry in _pids(proc):
        if entry == exclude:
            continue
        try:
            descriptors = os.listdir(proc / str(entry) / "fd")
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue  # gone since the listing
        opened: set[int] = set()
        for fd in descriptors:
            try:
                target = os.readlink(proc / str(entry) / "fd" / fd)
            except OSError:
                continue
            if target.startswith(prefix):
                match = _GPU_DEVICE.fullmatch(target[len(prefix):])
                if match:
                    opened.add(int(match.group(1)))
        found.extend(DeviceOpener(entry, minors.get(minor)) for minor in sorted(opened))
    return DeviceUsers(tuple(found), unreadable)


def _pids(proc: Path) -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return []


def _bus_by_minor(gpus_dir: Path) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        buses = os.listdir(gpus_dir)
    except OSError:
        return out  # no driver here, or a kernel that does not expose it
    for bus in buses:
        try:
            text = (gpus_dir / bus / "information").read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        match = _MINOR.search(text)
        normal = normal_bus_id(bus)
        if match and normal is not None:
            out[int(match.group(1))] = normal
    return out
