"""`gpudoc restore`: real chains of edits (a profile edited by `fix --apply` twice, a real nanoGPT
config edited by `--retry-oom` relaunches) put back byte for byte; `--dry-run` writes nothing; a
file changed by hand since gpudoc's last edit, or a link planted in its place, is refused."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from gpudoc.runs.store import RunStore
from tests.commands.test_fix_e2e import JOB, PROFILE
from tests.conftest import CONFIGS, gpudoc_cli

NANOGPT_JOB = Path(__file__).with_name("jobs") / "nanogpt_config.py"
NANOGPT_CONFIG = CONFIGS / "nanoGPT__config__train_shakespeare_char.py"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _profile_applied_twice(tmp_path: Path) -> Path:
    shutil.copy(JOB, tmp_path / "train.py")
    profile = tmp_path / "gpudoc.toml"
    profile.write_text(PROFILE)
    for _ in range(2):  # two separate runs, each followed by an apply: one chain of edits
        ran = gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path)
        assert ran.returncode == 1, ran.stderr
        applied = gpudoc_cli("fix", "--apply", cwd=tmp_path)
        assert applied.returncode == 0, applied.stderr
    assert "micro_batch_size = 4" in profile.read_text()
    return profile


def test_a_profile_edited_by_two_applies_comes_back_byte_for_byte(tmp_path):
    profile = _profile_applied_twice(tmp_path)
    applied = profile.read_bytes()
    dry = gpudoc_cli("restore", "--dry-run", "--json", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    body = json.loads(dry.stdout)
    assert body["command"] == "restore" and body["status"] == "ok" and body["dry_run"] is True
    (doc,) = body["files"]
    assert doc["path"] == str(profile) and doc["action"] == "restore"
    # Each edit says what it changed from what, and starts where the one before it ended.
    first, second = doc["edits"]
    assert {"key": "train.micro_batch_size", "old": 16, "new": 8} in first["changes"]
    assert {"key": "train.micro_batch_size", "old": 8, "new": 4} in second["changes"]
    assert first["new_sha256"] == second["old_sha256"] and doc["to_sha256"] == first["old_sha256"]
    assert profile.read_bytes() == applied and (tmp_path / "gpudoc.toml.gpudoc.bak").exists()  # dry: nothing

    done = gpudoc_cli("restore", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert profile.read_text() == PROFILE
    assert not (tmp_path / "gpudoc.toml.gpudoc.bak").exists()  # spent: it held the original
    again = gpudoc_cli("restore", cwd=tmp_path)
    assert again.returncode == 0 and "Nothing to restore" in again.stdout


def test_a_relaunch_by_hand_after_an_apply_restores_the_profile_it_ran_with(tmp_path):
    """run -> fix --apply -> the user's own `gpudoc run` (a new chain, no edit of its own): what it
    launched with is gpudoc's edit, so restoring the latest run puts the profile back."""
    shutil.copy(JOB, tmp_path / "train.py")
    profile = tmp_path / "gpudoc.toml"
    profile.write_text(PROFILE)
    for step in (("run", "--no-check", "--", sys.executable, "train.py"), ("fix", "--apply"),
                 ("run", "--no-check", "--", sys.executable, "train.py")):
        gpudoc_cli(*step, cwd=tmp_path)
    assert "micro_batch_size = 8" in profile.read_text()
    done = gpudoc_cli("restore", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert profile.read_text() == PROFILE


def test_a_profile_changed_by_hand_after_the_apply_is_not_the_relaunchs_to_restore(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    profile = tmp_path / "gpudoc.toml"
    profile.write_text(PROFILE)
    gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path)
    gpudoc_cli("fix", "--apply", cwd=tmp_path)
    mine = profile.read_text().replace("micro_batch_size = 8", "micro_batch_size = 6")
    profile.write_text(mine)
    gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path)
    done = gpudoc_cli("restore", cwd=tmp_path)
    assert done.returncode == 0 and "Nothing to restore" in done.stdout, done.stderr
    assert profile.read_text() == mine


def test_a_file_changed_by_hand_since_is_refused_unless_forced(tmp_path):
    profile = _profile_applied_twice(tmp_path)
    hand = profile.read_text() + "# my own note\n"
    profile.write_text(hand)
    refused = gpudoc_cli("restore", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "changed since gpudoc's last edit" in refused.stderr
    assert str(profile) in refused.stderr and "Traceback" not in refused.stderr
    assert profile.read_text() == hand
    as_json = gpudoc_cli("restore", "--json", cwd=tmp_path)
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["file"] == str(profile)
    forced = gpudoc_cli("restore", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert profile.read_text() == PROFILE


def _nanogpt_chain(cwd: Path) -> tuple[Path, list]:
    shutil.copy(NANOGPT_JOB, cwd / "train.py")
    config = cwd / "config.py"
    shutil.copy(NANOGPT_CONFIG, config)
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "3", "--", "python", "train.py", "config.py", cwd=cwd,
                      env={"OOM_ABOVE": "16"})
    assert done.returncode == 0, done.stderr
    records = sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")
    return config, records


def test_a_real_config_edited_through_retry_oom_comes_back_byte_for_byte(tmp_path):
    config, records = _nanogpt_chain(tmp_path)
    assert "batch_size = 16\n" in config.read_text()
    # The records keep the chain of edits: each relaunch's edit starts from what the previous left.
    edits = [edit for record in records for edit in record.file_edits]
    assert [(c["old"], c["new"]) for e in edits for c in e["changes"] if c["key"] == "batch_size"] == [(64, 32), (32, 16)]
    assert edits[0]["old_sha256"] == _sha(NANOGPT_CONFIG) and edits[0]["new_sha256"] == edits[1]["old_sha256"]
    assert edits[1]["new_sha256"] == _sha(config)

    edited = config.read_bytes()
    dry = gpudoc_cli("restore", records[0].id, "--dry-run", cwd=tmp_path)  # any run of the chain names it
    assert dry.returncode == 0, dry.stderr
    assert "would go to its state before gpudoc's first edit" in dry.stdout and config.read_bytes() == edited
    done = gpudoc_cli("restore", records[0].id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_bytes() == NANOGPT_CONFIG.read_bytes()


def test_a_relaunch_by_hand_after_an_apply_to_a_jobs_own_config_restores_it(tmp_path):
    """No profile: `fix --apply` edits the config the job names; the user's own `gpudoc run` of the
    same command reads it as gpudoc left it, so restoring the latest run puts it back."""
    shutil.copy(NANOGPT_JOB, tmp_path / "train.py")
    config = tmp_path / "config.py"
    shutil.copy(NANOGPT_CONFIG, config)
    run = ("run", "--no-check", "--", "python", "train.py", "config.py")
    assert gpudoc_cli(*run, cwd=tmp_path, env={"OOM_ABOVE": "16"}).returncode == 1
    applied = gpudoc_cli("fix", "--apply", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    assert config.read_bytes() != NANOGPT_CONFIG.read_bytes()
    gpudoc_cli(*run, cwd=tmp_path, env={"OOM_ABOVE": "16"})
    done = gpudoc_cli("restore", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_bytes() == NANOGPT_CONFIG.read_bytes()


def test_a_later_chain_restores_to_its_own_start_and_keeps_its_own_backup(tmp_path):
    config, _ = _nanogpt_chain(tmp_path)
    assert gpudoc_cli("restore", cwd=tmp_path).returncode == 0
    # The user now edits by hand, and a new chain starts from there.
    mine = config.read_text().replace("batch_size = 64", "batch_size = 48")
    config.write_text(mine)
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "3", "--", "python", "train.py", "config.py", cwd=tmp_path,
                      env={"OOM_ABOVE": "16"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "config.py.gpudoc.bak").read_text() == mine  # this chain's first backup
    assert "batch_size = 12\n" in config.read_text()  # 48 -> 24 -> 12
    assert gpudoc_cli("restore", cwd=tmp_path).returncode == 0
    assert config.read_text() == mine  # not the original of the chain before


def test_a_link_planted_in_place_of_the_config_is_never_followed(tmp_path):
    config, _ = _nanogpt_chain(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not gpudoc's\n")
    config.unlink()
    config.symlink_to(victim)
    refused = gpudoc_cli("restore", "--force", cwd=tmp_path)
    assert refused.returncode == 2 and "symbolic link" in refused.stderr, refused.stderr
    assert victim.read_text() == "not gpudoc's\n" and config.is_symlink()


def test_a_file_gpudoc_created_is_removed(tmp_path):
    from gpudoc.commands.restore import restore
    from gpudoc.runs.edits import remembered_edit
    from gpudoc.runs.record import RunRecord, now_iso
    from gpudoc.runs.store import new_run_id
    from tests.conftest import captured_workspace

    ws = captured_workspace(tmp_path)
    record = RunRecord(id=new_run_id(), command=["python", "train.py"], cwd=str(tmp_path), started_at=now_iso())
    ws.store.create(record)
    created = tmp_path / "gpudoc.toml"
    with remembered_edit(ws.store, record, created, rung="halve-micro-batch", changes=[]):
        created.write_text('extends = "gpu-16gb"\n[train]\nmicro_batch_size = 4\n')  # as fix --apply does
    assert ws.store.load(record.id).applied_edits[0]["old_sha256"] is None
    assert restore(ws, dry_run=True) == 0 and created.exists()
    assert "would be removed (gpudoc created it)" in ws.console.out.getvalue()
    assert restore(ws) == 0 and not created.exists()


def test_a_profile_edited_by_retry_oom_comes_back_and_the_records_say_each_edit(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    profile = tmp_path / "gpudoc.toml"
    profile.write_text(PROFILE)
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "6", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = sorted(RunStore(tmp_path / ".gpudoc").records(), key=lambda r: r.started_at or "")
    # Each failed run lists the profile edit made after it: 16 -> 8 -> 4 -> 2.
    halvings = [c for r in records for e in r.applied_edits for c in e["changes"] if c["key"] == "train.micro_batch_size"]
    assert [(c["old"], c["new"]) for c in halvings] == [(16, 8), (8, 4), (4, 2)]
    assert gpudoc_cli("restore", cwd=tmp_path).returncode == 0
    assert profile.read_text() == PROFILE


DS_PROFILE = ('[train]\nmicro_batch_size = 16\ngradient_accumulation_steps = 2\n\n[bind]\nenv = true\n\n'
              '[bind.files]\n"ds_config.json" = "deepspeed"\n')
DS_CONFIG = '{\n  "train_micro_batch_size_per_gpu": 16,\n  "gradient_accumulation_steps": 2\n}\n'


def test_restoring_the_applied_run_also_undoes_the_relaunch_by_hand_it_led_to(tmp_path):
    """run A -> fix --apply (the profile) -> the user's own `gpudoc run` B, which writes the applied
    knobs into the bound ds_config.json: B launched with gpudoc's edit, so B's edits are the chain's
    too, and `restore A` puts back both files, not the profile alone."""
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(DS_PROFILE)
    config = tmp_path / "ds_config.json"
    config.write_text(DS_CONFIG)
    run = ("run", "--no-check", "--", sys.executable, "train.py")
    assert gpudoc_cli(*run, cwd=tmp_path).returncode == 1
    first = RunStore(tmp_path / ".gpudoc").ids()[-1]
    assert gpudoc_cli("fix", "--apply", cwd=tmp_path).returncode == 0
    gpudoc_cli(*run, cwd=tmp_path)
    assert '"train_micro_batch_size_per_gpu": 8' in config.read_text()
    done = gpudoc_cli("restore", first, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Restored 2 of 2" in done.stdout, done.stdout
    assert config.read_text() == DS_CONFIG and (tmp_path / "gpudoc.toml").read_text() == DS_PROFILE
