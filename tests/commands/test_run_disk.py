"""`gpudoc run` where its records cannot be written: refused before the launch (125, one line),
or, once the job runs, said once while the job goes on and keeps its exit status.

The read-only and full cases mount a small tmpfs and so need root (CI runs as root); the
not-a-directory case needs nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpudoc.profiles.from_job import NOTHING_READ
from tests.conftest import gpudoc_cli, needs_root


def _refused(done, *words: str) -> None:
    assert done.returncode == 125, done.stderr
    assert "Traceback" not in done.stderr
    # Besides the pre-launch notice of what was read from the command (nothing, for `python -c`),
    # the refusal is one line.
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith(f"gpudoc: {NOTHING_READ}")]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0]


def test_a_home_that_is_a_file_refuses_the_launch(isolated_home):
    home = isolated_home / "not-a-dir"
    home.write_text("")
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "open('ran', 'w')",
                      cwd=isolated_home, env={"GPUDOC_HOME": str(home)})
    _refused(done, f"{home}/runs", "Not a directory", "GPUDOC_HOME")
    assert not (isolated_home / "ran").exists()  # refused before the launch


@needs_root
def test_a_read_only_home_refuses_the_launch(isolated_home, tmpfs):
    home = tmpfs("ro,size=64k")
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "open('ran', 'w')",
                      cwd=isolated_home, env={"GPUDOC_HOME": str(home)})
    _refused(done, "Read-only file system")
    assert not (isolated_home / "ran").exists()


@needs_root
def test_a_full_home_refuses_the_launch_and_leaves_no_half_run(isolated_home, tmpfs):
    home = tmpfs("size=64k")
    filler = home / "filler"
    with open(filler, "wb") as handle:
        try:
            handle.write(b"x" * 128 * 1024)
        except OSError:
            pass
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "open('ran', 'w')",
                      cwd=isolated_home, env={"GPUDOC_HOME": str(home)})
    _refused(done, "No space left on device", "free some space")
    assert not (isolated_home / "ran").exists()
    assert list((home / "runs").iterdir()) == []


@needs_root
def test_a_disk_filled_by_the_job_keeps_its_status_and_says_so_once(isolated_home, tmpfs):
    home = tmpfs("size=256k")
    job = (f"try:\n    open({str(home / 'filler')!r}, 'wb').write(b'x' * 10**6)\n"
           "except OSError:\n    pass\nprint('done', flush=True)\n")
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", job,
                      cwd=isolated_home, env={"GPUDOC_HOME": str(home)})
    assert done.returncode == 0, done.stderr  # the job succeeded: so does the run
    assert "done" in done.stdout and "Traceback" not in done.stderr
    assert done.stderr.count("cannot write gpudoc's run records: No space left on device") == 1
    [record] = (home / "runs").glob("*/run.json")
    assert json.loads(record.read_text())["status"] == "running"  # the last whole record is kept
    listed = gpudoc_cli("runs", "--json", cwd=isolated_home, env={"GPUDOC_HOME": str(home)})
    assert [run["status"] for run in json.loads(listed.stdout)["runs"]] == ["lost"]  # never "running" for ever


OOM_LOG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and "
           "341.25 MiB is reserved by PyTorch but unallocated.\n")


@needs_root
def test_fix_apply_in_a_read_only_directory_is_one_line_and_changes_nothing(tmpfs):
    work = tmpfs("size=1m")
    profile = "[train]\nmicro_batch_size = 8\n[bind]\nenv = true\n"
    (work / "gpudoc.toml").write_text(profile)
    (work / "oom.log").write_text(OOM_LOG)
    subprocess.run(["mount", "-o", "remount,ro", str(work)], check=True)
    done = gpudoc_cli("fix", "--log", "oom.log", "--apply", cwd=work)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gpudoc: {work / 'gpudoc.toml.gpudoc.bak'}: cannot write: Read-only file system; nothing was written"]
    assert (work / "gpudoc.toml").read_text() == profile


@needs_root
def test_fix_apply_on_an_immutable_profile_is_one_line_and_leaves_nothing(tmp_path):
    # chattr +i needs a file system that has it: a small ext4 image on a loop device.
    image, mount_point = tmp_path / "fs.img", tmp_path / "ext4"
    mount_point.mkdir()
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    made = subprocess.run(["mkfs.ext4", "-q", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 image here: {made.stderr.strip()}")
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:  # no loop devices (a locked-down container)
        pytest.skip(f"cannot mount a loop device here: {mounted.stderr.strip()}")
    profile = mount_point / "gpudoc.toml"
    try:
        profile.write_text("[train]\nmicro_batch_size = 8\n[bind]\nenv = true\n")
        (mount_point / "oom.log").write_text(OOM_LOG)
        subprocess.run(["chattr", "+i", str(profile)], check=True)
        done = gpudoc_cli("fix", "--log", "oom.log", "--apply", cwd=mount_point)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines() == [
            f"gpudoc: {profile}: cannot write: Operation not permitted; nothing was written"]
        assert sorted(p.name for p in mount_point.iterdir()) == ["gpudoc.toml", "lost+found", "oom.log"]
    finally:
        subprocess.run(["chattr", "-i", str(profile)], check=False)
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
