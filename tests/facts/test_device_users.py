"""Who has a GPU's device file open: the real /proc of real processes, and a driver's /proc layout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudoc.facts import device_users as scan
from gpudoc.facts.model import DeviceOpener, DeviceUsers, normal_bus_id

NOBODY = 65534


@pytest.fixture
def fake_dev(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_bytes(b"")
    return dev


def hold_open(*paths: Path) -> subprocess.Popen:
    """A real process that holds ``paths`` open until killed, as a CUDA process holds /dev/nvidiaN."""
    code = ("import sys, time\nfiles = [open(p, 'rb') for p in sys.argv[1:]]\nprint('open', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, paths)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "open\n"
    return proc


def test_a_real_process_holding_a_gpu_device_file_is_found(fake_dev):
    holder = hold_open(fake_dev / "nvidia1", fake_dev / "nvidiactl")
    bystander = hold_open(fake_dev / "nvidiactl", fake_dev / "nvidia-uvm")  # every CUDA process has these
    try:
        users = scan.device_users(dev=fake_dev)
    finally:
        for p in (holder, bystander):
            p.kill()
            p.wait()
    assert DeviceOpener(holder.pid, None) in users.openers  # this machine's driver maps no minor
    assert all(o.pid != bystander.pid for o in users.openers)
    assert holder.pid in users.holders_of("00000000:17:00.0")


def test_gpudoc_itself_is_left_out(fake_dev):
    with open(fake_dev / "nvidia0", "rb"):
        assert os.getpid() not in {o.pid for o in scan.device_users(dev=fake_dev, exclude=os.getpid()).openers}
        assert os.getpid() in {o.pid for o in scan.device_users(dev=fake_dev).openers}


def _fake_proc(root: Path, fds: dict[int, list[str]], minors: dict[str, int]) -> Path:
    """The driver's /proc layout: /proc/PID/fd/N links and /proc/driver/nvidia/gpus/BUS/information."""
    proc = root / "proc"
    for pid, targets in fds.items():
        fd = proc / str(pid) / "fd"
        fd.mkdir(parents=True)
        for n, target in enumerate(targets):
            (fd / str(n)).symlink_to(target)
    for bus, minor in minors.items():
        info = proc / "driver" / "nvidia" / "gpus" / bus
        info.mkdir(parents=True)
        (info / "information").write_text(f"Model: \t\t NVIDIA A100\nIRQ:   \t\t 153\nDevice Minor: \t {minor}\n")
    return proc


def test_the_minor_number_names_the_gpu(tmp_path):
    proc = _fake_proc(tmp_path, {101: ["/dev/nvidia0", "/dev/nvidiactl"], 102: ["/dev/nvidia1"], 104: ["/tmp/x"]},
                      {"0000:17:00.0": 0, "0000:65:00.0": 1})
    users = scan.device_users(proc=proc, dev=Path("/dev"))
    assert users.openers == (DeviceOpener(101, "0000:17:00.0"), DeviceOpener(102, "0000:65:00.0"))
    assert users.holders_of("00000000:65:00.0") == (102,)  # NVML's spelling of the same bus
    assert users.holders_of("00000000:17:00.0") == (101,)


def _scan_as_nobody() -> DeviceUsers:
    """The scan as a user who is not root, over this machine's real /proc: a forked child drops to
    nobody (gpudoc already imported), and reports through a pipe."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's result is asserted in the parent
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            users = scan.device_users()
            os.write(write, f"{users.unreadable}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(child, 0)
    return DeviceUsers(unreadable=int(answer))


def test_other_users_processes_are_counted_unreadable_for_a_user_who_is_not_root():
    if os.geteuid() == 0:
        # This test's own process is root's: nobody may not read its descriptors.
        assert _scan_as_nobody().unreadable >= 1
    else:
        others = [p for p in Path("/proc").iterdir() if p.name.isdigit() and p.stat().st_uid != os.geteuid()]
        assert (scan.device_users().unreadable >= 1) == bool(others)


def test_an_unmapped_opener_may_hold_any_gpu():
    users = DeviceUsers((DeviceOpener(7, None), DeviceOpener(8, "0000:17:00.0")))
    assert users.holders_of("00000000:17:00.0") == (7, 8)
    assert users.holders_of("00000000:65:00.0") == (7,)


@pytest.mark.parametrize(("given", "normal"), [("00000000:17:00.0", "0000:17:00.0"), ("0000:AB:00.1", "0000:ab:00.1"),
                                               ("17:00.0", "0000:17:00.0"), (None, None)])
def test_bus_ids_have_one_spelling(given, normal):
    assert normal_bus_id(given) == normal


def test_a_vanished_process_or_an_unreadable_proc_is_no_error(tmp_path):
    assert scan.device_users(proc=tmp_path / "absent") == DeviceUsers()
    started = time.monotonic()
    scan.device_users()  # this machine's real /proc: whatever it holds, no exception, quickly
    assert time.monotonic() - started < 5
