import os
import shutil
from pathlib import Path

from gpudoc.facts.host import host_facts, in_container


def test_host_facts_of_this_machine_are_sane(tmp_path):
    runs = tmp_path / "not" / "yet" / "runs"
    host = host_facts(runs)
    assert host.hostname
    assert host.uid == os.getuid()
    assert host.user
    assert 1 <= host.cpu_count <= os.cpu_count()
    assert host.cpu_count <= len(os.sched_getaffinity(0))
    assert 0 < host.ram_available_bytes <= host.ram_total_bytes
    assert host.runs_dir == str(runs)
    # the runs directory does not exist yet: its nearest existing parent answers
    assert host.runs_dir_free_bytes == shutil.disk_usage(tmp_path).free or host.runs_dir_free_bytes > 0
    if Path("/dev/shm").is_dir():
        assert host.shm_total_bytes == shutil.disk_usage("/dev/shm").total
        assert 0 <= host.shm_free_bytes <= host.shm_total_bytes
    assert isinstance(host.in_container, bool)
    assert not runs.exists()  # reading facts creates nothing


def test_missing_shm_is_a_reason_not_a_crash(tmp_path):
    host = host_facts(tmp_path, shm=tmp_path / "no-shm")
    assert host.shm_total_bytes is None and host.shm_free_bytes is None
    assert "missing" in host.unavailable["shm_total_bytes"]


def test_ram_is_what_psutil_reports(tmp_path):
    # Read from /proc/meminfo directly (psutil's import is a twentieth of `gpudoc check`): the
    # same figures as psutil's, give or take what the machine did between the two reads.
    import psutil

    memory = psutil.virtual_memory()
    host = host_facts(tmp_path)
    assert host.ram_total_bytes == memory.total or host.ram_total_bytes < memory.total  # a cgroup limit
    assert abs(host.ram_available_bytes - min(memory.available, host.ram_total_bytes)) < 256 * 1024**2


def test_ram_from_an_older_kernel_and_an_unreadable_meminfo(tmp_path):
    old = tmp_path / "meminfo"
    old.write_text("MemTotal:       16000000 kB\nMemFree:         1000000 kB\nBuffers:          200000 kB\n"
                   "Cached:          3000000 kB\nSwapCached:            0 kB\n")
    host = host_facts(tmp_path, meminfo=old, cgroup_root=tmp_path / "none", proc_cgroup=tmp_path / "none")
    assert host.ram_total_bytes == 16_000_000 * 1024
    assert host.ram_available_bytes == (1_000_000 + 200_000 + 3_000_000) * 1024
    host = host_facts(tmp_path, meminfo=tmp_path / "missing")
    assert host.ram_total_bytes is None and "cannot read memory" in host.unavailable["ram_total_bytes"]


def _cgroup(tmp_path, cpu_max=None, memory_max=None, memory_current=None):
    root = tmp_path / "cgroup"
    leaf = root / "job"
    leaf.mkdir(parents=True)
    if cpu_max:
        (leaf / "cpu.max").write_text(cpu_max + "\n")
    if memory_max:
        (leaf / "memory.max").write_text(memory_max + "\n")
    if memory_current:
        (leaf / "memory.current").write_text(memory_current + "\n")
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/job\n")
    return root, proc


def test_cgroup_cpu_quota_limits_usable_cpus(tmp_path):
    root, proc = _cgroup(tmp_path, cpu_max="100000 100000")  # docker --cpus=1
    host = host_facts(tmp_path, cgroup_root=root, proc_cgroup=proc)
    assert host.cpu_count == 1


def test_fractional_quota_rounds_up_and_max_means_no_limit(tmp_path):
    root, proc = _cgroup(tmp_path, cpu_max="50000 100000")
    assert host_facts(tmp_path, cgroup_root=root, proc_cgroup=proc).cpu_count == 1
    root2, proc2 = _cgroup(tmp_path / "b", cpu_max="max 100000")
    assert host_facts(tmp_path, cgroup_root=root2, proc_cgroup=proc2).cpu_count == len(os.sched_getaffinity(0))


def test_cgroup_memory_limit_caps_ram(tmp_path):
    gib = 1024**3
    root, proc = _cgroup(tmp_path, memory_max=str(2 * gib), memory_current=str(gib // 2))
    host = host_facts(tmp_path, cgroup_root=root, proc_cgroup=proc)
    assert host.ram_total_bytes == 2 * gib
    assert host.ram_available_bytes <= 2 * gib - gib // 2


def test_container_detection_from_cgroup_hints(tmp_path):
    proc = tmp_path / "cg"
    proc.write_text("0::/kubepods/burstable/pod1234/abc\n")
    assert in_container(proc_cgroup=proc, root=tmp_path) is True
    (tmp_path / ".dockerenv").write_text("")
    proc.write_text("0::/\n")
    assert in_container(proc_cgroup=proc, root=tmp_path) is True
