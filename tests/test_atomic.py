"""Atomic writes: modes, links followed only for the files the user named, backups that never follow."""

from __future__ import annotations

import os

import pytest

from gpudoc.atomic import atomic_write_text, backup
from gpudoc.bind.apply import apply_file_edits
from gpudoc.bind.plan import plan_bindings
from gpudoc.profiles.model import Profile


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
