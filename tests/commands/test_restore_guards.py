"""`gpudoc restore`'s refusals without a real job: the edits are made as `fix --apply` makes them
(``remembered_edit`` around the write, listed in the failed run's record), on real files, and
restore runs through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

from gpudoc.runs.edits import remembered_edit
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.runs.store import RunStore, new_run_id
from tests.conftest import gpudoc_cli

PROFILE = 'extends = "gpu-16gb"\n[train]\nmicro_batch_size = 16\n'
CONFIG = '{"train_micro_batch_size_per_gpu": 16}\n'


def _edited(cwd: Path) -> tuple[Path, Path]:
    """A run whose `fix --apply` edited two files: a config (sorted first) and the profile."""
    store = RunStore(cwd / ".gpudoc")
    record = RunRecord(id=new_run_id(), command=["python", "train.py"], cwd=str(cwd), started_at=now_iso())
    store.create(record)
    config, profile = cwd / "a_config.json", cwd / "gpudoc.toml"
    for path, before in ((config, CONFIG), (profile, PROFILE)):
        path.write_text(before)
        with remembered_edit(store, record, path, rung="halve-micro-batch", changes=[]):
            path.write_text(before.replace("16", "8"))
    return config, profile


def test_a_file_made_read_only_after_the_edit_is_refused_even_forced_and_nothing_is_written(tmp_path):
    config, profile = _edited(tmp_path)
    profile.chmod(0o444)
    for force in ((), ("--force",)):
        refused = gpudoc_cli("restore", *force, cwd=tmp_path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert f"{profile}: read-only (mode 0444)" in refused.stderr and "chmod u+w" in refused.stderr
        assert "nothing was restored" in refused.stderr
        # Every file is checked before any is written: the writable config, first in order, too.
        assert config.read_text() == CONFIG.replace("16", "8") and profile.read_text() == PROFILE.replace("16", "8")
        assert os.stat(profile).st_mode & 0o777 == 0o444
    profile.chmod(0o644)  # the user's own way to let gpudoc write it
    done = gpudoc_cli("restore", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_text() == CONFIG and profile.read_text() == PROFILE


def test_a_link_to_a_read_only_file_is_refused_by_its_targets_mode(tmp_path):
    config, _ = _edited(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "a_config.json"
    os.replace(config, target)
    config.symlink_to(target)  # a config kept in a shared folder, edited through the link
    target.chmod(0o444)
    refused = gpudoc_cli("restore", "--force", cwd=tmp_path)
    assert refused.returncode == 2 and f"{config}: read-only (mode 0444)" in refused.stderr, refused.stderr
    assert target.read_text() == CONFIG.replace("16", "8") and config.is_symlink()


DS_PROFILE = ('[train]\nmicro_batch_size = 8\ngradient_accumulation_steps = 2\n\n[bind]\nenv = true\n\n'
              '[bind.files]\n"ds_config.json" = "deepspeed"\n')
DS_CONFIG = '{\n  "train_micro_batch_size_per_gpu": 16,\n  "gradient_accumulation_steps": 2\n}\n'


def test_a_runs_edit_over_a_hand_edit_an_older_backup_does_not_hold_keeps_it_and_restore_returns_to_it(tmp_path):
    """Chain 1 edits the bound config (its first backup holds the original); the user edits it by
    hand; the next run's edit keeps those bytes in the run store before writing (the backup is
    left as it was), and restoring that run puts the hand edit back, not the original."""
    import hashlib

    (tmp_path / "gpudoc.toml").write_text(DS_PROFILE)
    config = tmp_path / "ds_config.json"
    config.write_text(DS_CONFIG)
    run = ("run", "--no-check", "--", "python", "-c", "pass")
    assert gpudoc_cli(*run, cwd=tmp_path).returncode == 0
    backup = tmp_path / "ds_config.json.gpudoc.bak"
    assert backup.read_text() == DS_CONFIG and '"train_micro_batch_size_per_gpu": 8' in config.read_text()
    hand = config.read_text().replace('"train_micro_batch_size_per_gpu": 8', '"train_micro_batch_size_per_gpu": 4')
    config.write_text(hand)
    done = gpudoc_cli(*run, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"train_micro_batch_size_per_gpu": 8' in config.read_text() and backup.read_text() == DS_CONFIG
    kept = tmp_path / ".gpudoc" / "originals" / hashlib.sha256(hand.encode()).hexdigest()
    assert kept.read_text() == hand
    restored = gpudoc_cli("restore", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert config.read_text() == hand


def test_a_forced_restore_keeps_the_change_by_hand_it_overwrites_and_says_where(tmp_path):
    import hashlib
    import json

    _, profile = _edited(tmp_path)
    hand = profile.read_text() + "# my own note\n"
    profile.write_text(hand)
    dry = gpudoc_cli("restore", "--force", "--dry-run", "--json", cwd=tmp_path)
    assert dry.returncode == 0 and all(doc["kept"] is None for doc in json.loads(dry.stdout)["files"])
    done = gpudoc_cli("restore", "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    kept = tmp_path / ".gpudoc" / "originals" / "unlisted" / hashlib.sha256(hand.encode()).hexdigest()
    assert kept.read_text() == hand and profile.read_text() == PROFILE
    assert f"{profile}: back to its state before gpudoc's first edit (changed by hand since; --force: that " \
           f"change is kept in {kept})" in done.stdout, done.stdout


def test_a_forced_restore_that_cannot_keep_the_change_by_hand_restores_nothing(tmp_path):
    config, profile = _edited(tmp_path)
    hand = profile.read_text() + "# my own note\n"
    profile.write_text(hand)
    (tmp_path / ".gpudoc" / "originals" / "unlisted").write_text("")  # no folder can be made there
    refused = gpudoc_cli("restore", "--force", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"{profile}: its change by hand cannot be kept ({tmp_path / '.gpudoc' / 'originals' / 'unlisted'}: not a " \
           "folder of gpudoc's own (a link, or a file)); nothing was restored" in refused.stderr, refused.stderr
    assert profile.read_text() == hand and config.read_text() == CONFIG.replace("16", "8")
