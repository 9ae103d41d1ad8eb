"""Facts about the machine gpudoc runs on: CPUs this process may use, RAM, /dev/shm, disk.

Counts honour what containers and schedulers impose: CPU affinity (Slurm, taskset), the cgroup
CPU quota (Docker ``--cpus``, Kubernetes limits) and the cgroup memory limit, because a data
loader sized for the host's 128 cores in a 8-CPU container is a classic slowdown.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from gpudoc.facts.model import HostFacts

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
PROC_MEMINFO = Path("/proc/meminfo")


def host_facts(runs_dir: Path | str, *, cgroup_root: Path = CGROUP_ROOT,
               proc_cgroup: Path = PROC_SELF_CGROUP, shm: Path = Path("/dev/shm"),
               meminfo: Path = PROC_MEMINFO) -> HostFacts:
    """Never raises: what cannot be read is None with a reason in ``unavailable``."""
    unavailable: dict[str, str] = {}
    values: dict = {}

    values["hostname"] = os.uname().nodename  # what socket.gethostname() returns, without importing socket
    values["uid"] = os.getuid()
    values["user"] = _user()

    cgroup_dirs = _cgroup_dirs(cgroup_root, proc_cgroup)
    values["cpu_count"] = _usable_cpus(cgroup_root, cgroup_dirs)

    try:
        total, available = _meminfo(meminfo)
        limit, current = _cgroup_memory(cgroup_root, cgroup_dirs)
        if limit is not None and limit < total:
            total = limit
            if current is not None:
                available = max(0, min(available, limit - current))
        values["ram_total_bytes"] = total
        values["ram_available_bytes"] = available
    except (OSError, KeyError, ValueError) as exc:  # /proc unreadable or not Linux's
        unavailable["ram_total_bytes"] = unavailable["ram_available_bytes"] = f"cannot read memory: {exc}"

    try:
        usage = shutil.disk_usage(shm)
        values["shm_total_bytes"] = usage.total
        values["shm_free_bytes"] = usage.free
    except OSError as exc:
        reason = f"{shm} is missing" if isinstance(exc, FileNotFoundError) else f"{shm}: {exc.strerror or exc}"
        unavailable["shm_total_bytes"] = unavailable["shm_free_bytes"] = reason

    runs_dir = Path(runs_dir)
    values["runs_dir"] = str(runs_dir)
    existing = _nearest_existing(runs_dir)
    try:
        values["runs_dir_free_bytes"] = shutil.disk_usage(existing).free
    except OSError as exc:
        unavailable["runs_dir_free_bytes"] = f"{existing}: {exc.strerror or exc}"

    values["in_container"] = in_container(proc_cgroup=proc_cgroup)
    return HostFacts(**values, unavailable=unavailable)


def _meminfo(path: Path) -> tuple[int, int]:
    """The machine's RAM and what is available to start new programs, in bytes: the kernel's own
    estimate (MemAvailable, Linux 3.14+), as psutil reports it; read directly, psutil costs ~5 ms
    of `gpudoc check`'s start-up."""
    fields = {}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached"):
            fields[key] = int(rest.split()[0]) * 1024  # "kB"
    available = fields.get("MemAvailable")
    if available is None:  # older kernels: psutil's fallback, roughly
        available = fields["MemFree"] + fields.get("Buffers", 0) + fields.get("Cached", 0)
    return fields["MemTotal"], available


def _user() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _cgroup_dirs(root: Path, proc_cgroup: Path) -> list[Path]:
    """This process's cgroup v2 directory and its ancestors, innermost first."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return [root]
    for line in lines:
        if line.startswith("0::"):
            rel = line[3:].strip().lstrip("/")
            here = root / rel if rel else root
            dirs = []
            while True:
                dirs.append(here)
                if here == root or root not in here.parents:
                    break
                here = here.parent
            return dirs
    return [root]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _usable_cpus(root: Path, dirs: list[Path]) -> int | None:
    count: int | None
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count()
    quotas = []
    for directory in dirs:  # cgroup v2: "max 100000" or "200000 100000"
        text = _read(directory / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max" and period:
                quotas.append(int(quota) / int(period))
    quota_v1 = _read(root / "cpu" / "cpu.cfs_quota_us") or _read(root / "cpu,cpuacct" / "cpu.cfs_quota_us")
    period_v1 = _read(root / "cpu" / "cpu.cfs_period_us") or _read(root / "cpu,cpuacct" / "cpu.cfs_period_us")
    if quota_v1 and period_v1 and int(quota_v1) > 0:
        quotas.append(int(quota_v1) / int(period_v1))
    if quotas:
        limit = max(1, math.ceil(min(quotas)))
        count = min(count, limit) if count else limit
    return count


def _cgroup_memory(root: Path, dirs: list[Path]) -> tuple[int | None, int | None]:
    limits = []
    current = None
    for directory in dirs:
        text = _read(directory / "memory.max")
        if text and text != "max":
            limits.append(int(text))
            if current is None:
                cur = _read(directory / "memory.current")
                current = int(cur) if cur and cur.isdigit() else None
    text = _read(root / "memory" / "memory.limit_in_bytes")
    # cgroup v1 says "no limit" with a huge page-aligned number
    if text and text.isdigit() and int(text) < 2**60:
        limits.append(int(text))
        cur = _read(root / "memory" / "memory.usage_in_bytes")
        current = int(cur) if cur and cur.isdigit() else current
    return (min(limits) if limits else None), current


def in_container(*, proc_cgroup: Path = PROC_SELF_CGROUP, root: Path = Path("/")) -> bool:
    if (root / ".dockerenv").exists() or (root / "run" / ".containerenv").exists():
        return True
    # systemd-nspawn and podman name it in lower case.
    if os.environ.get("container") or os.environ.get("KUBERNETES_SERVICE_HOST"):  # noqa: SIM112
        return True
    text = _read(proc_cgroup) or ""
    return any(hint in text for hint in ("docker", "kubepods", "containerd", "libpod", "lxc"))
