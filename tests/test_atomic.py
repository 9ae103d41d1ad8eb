"""Atomic writes: modes, links followed only for the files the user named, backups that never follow."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpudoc.atomic import atomic_write_text, backup, edit_lock
from gpudoc.bind.apply import apply_file_edits
from gpudoc.bind.plan import plan_bindings
from gpudoc.profiles.model import Profile
from tests.conftest import REPO


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_a_new_file_gets_the_usual_mode_and_an_existing_one_keeps_its_own(tmp_path, umask_027):
    fresh = tmp_path / "gpudoc.toml"
    atomic_write_text(fresh, "x = 1\n")
    assert fresh.stat().st_mode & 0o777 == 0o640  # 0666 & ~027, not mkstemp's 0600
    private = tmp_path / "private.toml"
    private.write_text("")
    private.chmod(0o600)
    atomic_write_text(private, "y = 2\n")
    assert private.stat().st_mode & 0o777 == 0o600


def test_a_link_the_user_named_is_edited_at_its_target_and_stays_a_link(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "ds_config.json"
    target.write_text('{"train_micro_batch_size_per_gpu": 1}\n')
    link = tmp_path / "ds_config.json"
    link.symlink_to(target)
    profile = Profile(name="p", path=tmp_path / "gpudoc.toml", train={"micro_batch_size": 4},
                      bind={"env": False, "files": {"ds_config.json": "deepspeed"}})
    plan = plan_bindings(profile, ["python", "train.py"], cwd=tmp_path)
    [record] = apply_file_edits(plan)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert '"train_micro_batch_size_per_gpu": 4' in target.read_text()
    backup_path = tmp_path / "ds_config.json.gpudoc.bak"
    assert record["backup"] == str(backup_path)
    assert not backup_path.is_symlink() and '"train_micro_batch_size_per_gpu": 1' in backup_path.read_text()


def test_gpudocs_own_writes_and_backups_never_follow_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = tmp_path / "run.json"
    planted.symlink_to(victim)
    atomic_write_text(planted, "{}\n")
    assert victim.read_text() == "precious\n" and not planted.is_symlink()
    config = tmp_path / "cfg.yaml"
    config.write_text("a: 1\n")
    (tmp_path / "cfg.yaml.gpudoc.bak").symlink_to(victim)
    backup(config)
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "cfg.yaml.gpudoc.bak").read_text() == "a: 1\n"


def test_the_first_backup_of_a_chain_is_kept(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("batch_size: 45\n")
    for value in (22, 11):
        backup(config)
        atomic_write_text(config, f"batch_size: {value}\n")
    assert (tmp_path / "cfg.yaml.gpudoc.bak").read_text() == "batch_size: 45\n"


def test_bytes_no_backup_holds_are_never_given_up_unless_held_elsewhere(tmp_path):
    """The first backup holds an earlier chain's start; the file was edited by hand since: the edit
    goes ahead only when ``held`` keeps those bytes, and the first backup stays as it was."""
    from gpudoc.errors import InputError

    config = tmp_path / "cfg.yaml"
    config.write_text("batch_size: 45\n")
    saved = backup(config)
    config.write_text("batch_size: 30  # by hand\n")
    with pytest.raises(InputError, match="changed since its backup .* no backup holds what it holds now"):
        backup(config, held=lambda _data: False)
    kept: list[bytes] = []
    assert backup(config, held=lambda data: kept.append(data) or True) == saved
    assert kept == [b"batch_size: 30  # by hand\n"] and saved.read_text() == "batch_size: 45\n"


def test_a_kill_during_the_backup_copy_leaves_the_previous_backup_whole(tmp_path):
    # The copy is atomic: a writer killed after its write, before its rename, changes nothing.
    config = tmp_path / "cfg.yaml"
    config.write_text("a: 1\n")
    saved = tmp_path / "cfg.yaml.gpudoc.bak"
    saved.write_text("a: 0\n")
    code = ("import os, sys\nfrom gpudoc import atomic\n"
            "os.replace = lambda *a: os.kill(os.getpid(), 9)\n"  # die where the rename would be
            f"atomic.atomic_write_bytes(__import__('pathlib').Path({str(saved)!r}), b'')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == -9
    assert saved.read_text() == "a: 0\n"


def test_the_edit_lock_serialises_two_editors(tmp_path):
    # A second process asks for the lock while this one holds it: it gets it only once this one has
    # let go. The child says when it is about to ask and when it got the lock (wall clock, which both
    # processes share), so a slow start-up of the child on a loaded machine changes nothing.
    code = ("import time\nfrom pathlib import Path\nfrom gpudoc.atomic import edit_lock\n"
            "print('asking', flush=True)\n"
            f"with edit_lock(Path({str(tmp_path)!r})):\n    print(time.time())\n")
    with edit_lock(tmp_path):
        other = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert other.stdout is not None and other.stdout.readline() == "asking\n"
        time.sleep(0.5)
        assert other.poll() is None  # still waiting
        letting_go = time.time()
    out, _ = other.communicate(timeout=60)
    assert float(out) >= letting_go
    assert list(tmp_path.iterdir()) == []  # no lock file left behind
    # flock belongs to an open file description: a second open, even in this process, must wait.
    with edit_lock(tmp_path), pytest.raises(TimeoutError), edit_lock(tmp_path, timeout_s=0.2):
        pass
