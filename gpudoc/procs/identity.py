"""Which process a PID is: the one PID-reuse guard every signal gpudoc sends goes through.

A PID is reused once its process is gone; the process's start time (``create_time``) is not. A
process is "the same" when its PID's start time now equals the one recorded, within
``CREATE_TIME_SLACK_S``; gpudoc signals nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Start times are whole clock ticks since boot (10 ms on Linux) plus the boot time; the same
# process read twice, by /proc or by psutil, agrees to well within this.
CREATE_TIME_SLACK_S = 0.05
# Against the wall clock, though, a start time reads early by up to this much: /proc/stat's boot
# time is whole seconds, truncated (a VM booted at x.72 s reads every start 0.72 s early), and the
# ticks since boot round down too. "Started since T" means a start time >= T minus this.
START_TIME_EARLY_S = 1.0

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_boot_time: float | None = None


@dataclass(frozen=True)
class ProcessRef:
    """A process, not just a PID: the PID and its start time (None: unknown, never signalled alone)."""

    pid: int
    create_time: float | None

    def to_dict(self) -> dict[str, int | float | None]:
        return {"pid": self.pid, "create_time": self.create_time}

    def is_running(self) -> bool:
        """Still this process (not gone, not a zombie, the PID not reused)."""
        if is_zombie_or_gone(self.pid):
            return False
        return self.create_time is None or same_start(start_time(self.pid), self.create_time)


def same_start(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= CREATE_TIME_SLACK_S


def live_pids() -> list[int]:
    """Every process this host shows in /proc (none when it cannot be read)."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on; the name may hold spaces and parens."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    end = data.rfind(b")")
    return data[end + 2:].decode("ascii", "replace").split() if end > 0 else None


def _boot() -> float | None:
    global _boot_time
    if _boot_time is None:
        try:
            with open("/proc/stat", "rb") as handle:
                for line in handle:
                    if line.startswith(b"btime"):
                        _boot_time = float(line.split()[1])
                        break
        except OSError:
            return None
    return _boot_time


def start_time(pid: int) -> float | None:
    """A process's start time in seconds since the epoch, computed exactly as psutil does (the
    values must compare equal with ``psutil.Process(pid).create_time()`` elsewhere in gpudoc)."""
    fields = proc_stat(pid)
    if fields is None:
        return None if os.path.isdir("/proc/self") else _psutil_start_time(pid)
    boot = _boot()
    if boot is None or len(fields) < 20:
        return _psutil_start_time(pid)
    return float(fields[19]) / _CLK_TCK + boot


def _psutil_start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def is_zombie_or_gone(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is None or fields[0] in ("Z", "X")


def signal_if_same(ref: ProcessRef, sig: int) -> bool:
    """Send ``sig`` when the PID is still this process; True when it was sent."""
    if ref.create_time is not None and not same_start(start_time(ref.pid), ref.create_time):
        return False  # gone, or the PID now belongs to someone else
    try:
        os.kill(ref.pid, sig)
    except OSError:
        return False
    return True


def signal_group(pgid: int | None, sig: int) -> None:
    """Send ``sig`` to the process group gpudoc made for a job; nothing when it is gone."""
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass  # the group is gone (or was never made): nothing to signal


def environ_value(pid: int, name: str) -> str | None:
    """``name`` in the environment process ``pid`` started with (this user's processes only:
    /proc/PID/environ is private); None when absent or unreadable. A hint, never proof."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read(1 << 20)
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "replace")
    return None
