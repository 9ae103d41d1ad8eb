"""Writing a suggestion into a profile: comments and layout kept, atomic, backed up; shipped
profiles never edited in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoc.errors import ProfileError, UsageError
from gpudoc.ladder.model import Suggestion
from gpudoc.profiles.edit import apply_changes
from gpudoc.profiles.loader import load_profile, load_profile_file, shipped_profiles_dir
from tests.conftest import gpudoc_cli

PROFILE = """\
# My job on 4x A10G.
description = "llama pretraining"   # shown by `gpudoc profile list`

[gpu]
count = 4

[train]   # knobs the job reads
micro_batch_size = 2              # per device
gradient_accumulation_steps = 64  # 2 x 64 x 4 = 512
zero_stage = 2

# bindings follow
[bind]
env = true
"""

HALVE = Suggestion("halve-micro-batch", {"micro_batch_size": [2, 1], "gradient_accumulation_steps": [64, 128]})
EXPANDABLE = Suggestion("expandable-segments", {}, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})


def write(path: Path, text: str = PROFILE) -> Path:
    path.write_text(text)
    return path


def test_changed_values_only_comments_and_other_lines_byte_identical(tmp_path):
    path = write(tmp_path / "job.toml")
    written = apply_changes(load_profile_file(path), HALVE, cwd=tmp_path)
    assert written == path
    before, after = PROFILE.splitlines(), path.read_text().splitlines()
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert changed == [
        ("micro_batch_size = 2              # per device", "micro_batch_size = 1              # per device"),
        ("gradient_accumulation_steps = 64  # 2 x 64 x 4 = 512", "gradient_accumulation_steps = 128  # 2 x 64 x 4 = 512"),
    ]
    reloaded = load_profile_file(path)
    assert reloaded.knobs["micro_batch_size"] == 1 and reloaded.global_batch_size == 512


def test_a_crlf_profile_keeps_crlf_on_every_line_new_ones_included(tmp_path):
    path = tmp_path / "job.toml"
    path.write_bytes(PROFILE.replace("\n", "\r\n").encode())
    apply_changes(load_profile_file(path), HALVE, cwd=tmp_path)
    apply_changes(load_profile_file(path), EXPANDABLE, cwd=tmp_path)  # adds an [env] table
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") > PROFILE.count("\n")
    assert b"micro_batch_size = 1              # per device\r\n" in data
    assert (tmp_path / "job.toml.gpudoc.bak").read_bytes() == PROFILE.replace("\n", "\r\n").encode()


def test_backup_holds_the_previous_text(tmp_path):
    path = write(tmp_path / "job.toml")
    apply_changes(load_profile_file(path), HALVE, cwd=tmp_path)
    backup = tmp_path / "job.toml.gpudoc.bak"
    assert backup.read_text() == PROFILE


def test_env_change_creates_env_table_and_keeps_the_rest(tmp_path):
    path = write(tmp_path / "job.toml")
    apply_changes(load_profile_file(path), EXPANDABLE, cwd=tmp_path)
    text = path.read_text()
    assert text.startswith(PROFILE)
    assert load_profile_file(path).env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_env_change_into_existing_env_table(tmp_path):
    text = PROFILE.replace("[bind]", "[env]\nOMP_NUM_THREADS = \"4\"  # 48 cores / 4 ranks\n\n[bind]")
    path = write(tmp_path / "job.toml", text)
    apply_changes(load_profile_file(path), EXPANDABLE, cwd=tmp_path)
    new = path.read_text()
    assert 'OMP_NUM_THREADS = "4"  # 48 cores / 4 ranks\nPYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"\n' in new
    assert new.endswith("[bind]\nenv = true\n")


def test_knob_missing_from_train_is_added_to_it(tmp_path):
    path = write(tmp_path / "job.toml")
    apply_changes(load_profile_file(path), Suggestion("zero-stage", {"offload_optimizer": [False, True]}), cwd=tmp_path)
    assert load_profile_file(path).knobs["offload_optimizer"] is True
    assert "# bindings follow" in path.read_text()


def test_shipped_profile_is_never_edited_and_gpudoc_toml_extends_it(tmp_path):
    shipped = shipped_profiles_dir() / "llama3.2-1b-4xa10g.toml"
    original = shipped.read_bytes()
    profile = load_profile("llama3.2-1b-4xa10g", cwd=tmp_path)
    assert profile.shipped
    written = apply_changes(profile, HALVE, cwd=tmp_path)
    assert written == tmp_path / "gpudoc.toml"
    assert shipped.read_bytes() == original
    child = load_profile(None, cwd=tmp_path)
    assert child.path == written and not child.shipped
    assert child.knobs["micro_batch_size"] == 1 and child.knobs["gradient_accumulation_steps"] == 128
    assert child.knobs["zero_stage"] == 2  # inherited
    text = written.read_text()
    assert 'extends = "llama3.2-1b-4xa10g"' in text
    assert "zero_stage" not in text  # only the changed keys
    # The next rung edits that project file in place.
    apply_changes(child, Suggestion("zero-stage", {"zero_stage": [2, 3]}), cwd=tmp_path)
    assert load_profile(None, cwd=tmp_path).knobs["zero_stage"] == 3
    assert (tmp_path / "gpudoc.toml.gpudoc.bak").exists()


def test_shipped_profile_with_existing_gpudoc_toml_extending_the_same_profile(tmp_path):
    write(tmp_path / "gpudoc.toml", 'extends = "mamba-16gb"  # mine\n\n[train]\nmax_seq_len = 512\n')
    profile = load_profile("mamba-16gb", cwd=tmp_path)
    apply_changes(profile, Suggestion("halve-micro-batch", {"micro_batch_size": [4, 2]}), cwd=tmp_path)
    text = (tmp_path / "gpudoc.toml").read_text()
    assert text == 'extends = "mamba-16gb"  # mine\n\n[train]\nmax_seq_len = 512\nmicro_batch_size = 2\n'


def test_shipped_profile_refused_when_gpudoc_toml_extends_something_else(tmp_path):
    existing = 'extends = "gpu-24gb"\n'
    write(tmp_path / "gpudoc.toml", existing)
    profile = load_profile("mamba-16gb", cwd=tmp_path)
    with pytest.raises(ProfileError, match="extends 'gpu-24gb', not the shipped profile 'mamba-16gb'"):
        apply_changes(profile, HALVE, cwd=tmp_path)
    assert (tmp_path / "gpudoc.toml").read_text() == existing


def test_child_profile_gets_the_override_when_the_knob_lives_in_the_parent(tmp_path):
    (tmp_path / ".gpudoc" / "profiles").mkdir(parents=True)
    parent = write(tmp_path / ".gpudoc" / "profiles" / "base.toml")
    child = write(tmp_path / "child.toml", '# child\nextends = "base"\n')
    profile = load_profile(str(child), cwd=tmp_path)
    assert profile.knobs["micro_batch_size"] == 2
    apply_changes(profile, HALVE, cwd=tmp_path)
    assert parent.read_text() == PROFILE
    assert load_profile(str(child), cwd=tmp_path).knobs["micro_batch_size"] == 1
    assert child.read_text().startswith('# child\nextends = "base"\n')


def test_free_stray_memory_cannot_be_written(tmp_path):
    path = write(tmp_path / "job.toml")
    with pytest.raises(UsageError):
        apply_changes(load_profile_file(path), Suggestion("free-stray-memory"), cwd=tmp_path)
    assert path.read_text() == PROFILE


def test_no_profile_env_change_creates_project_profile(tmp_path):
    from gpudoc.profiles.model import EMPTY

    written = apply_changes(EMPTY, EXPANDABLE, cwd=tmp_path)
    assert written == tmp_path / "gpudoc.toml"
    assert load_profile(None, cwd=tmp_path).env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_written_file_keeps_permissions_and_no_temp_files_left(tmp_path):
    path = write(tmp_path / "job.toml")
    path.chmod(0o640)
    apply_changes(load_profile_file(path), HALVE, cwd=tmp_path)
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.toml", "job.toml.gpudoc.bak"]


def test_a_link_planted_where_the_backup_goes_is_replaced_by_a_real_backup(tmp_path):
    path = write(tmp_path / "job.toml")
    elsewhere = write(tmp_path / "elsewhere", "not a backup\n")
    planted = tmp_path / "job.toml.gpudoc.bak"
    planted.symlink_to(elsewhere)
    apply_changes(load_profile_file(path), HALVE, cwd=tmp_path)
    assert not planted.is_symlink() and planted.read_text() == PROFILE
    assert elsewhere.read_text() == "not a backup\n"
    # That real backup is the first one: the next edit keeps it.
    apply_changes(load_profile_file(path), Suggestion("zero-stage", {"zero_stage": [2, 3]}), cwd=tmp_path)
    assert planted.read_text() == PROFILE


def test_fix_apply_reports_a_backup_that_holds_the_profile_even_over_a_planted_link(isolated_home):
    original = "[train]\nmicro_batch_size = 8\ngradient_accumulation_steps = 4\n"
    write(isolated_home / "gpudoc.toml", original)
    write(isolated_home / "oom.log", "CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; "
          "781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)\n")
    elsewhere = write(isolated_home / "elsewhere", "not a backup\n")
    (isolated_home / "gpudoc.toml.gpudoc.bak").symlink_to(elsewhere)
    done = gpudoc_cli("fix", "--log", "oom.log", "--apply", cwd=isolated_home)
    assert done.returncode == 0, done.stderr
    assert f"(backup: {isolated_home / 'gpudoc.toml.gpudoc.bak'})" in done.stdout
    assert (isolated_home / "gpudoc.toml.gpudoc.bak").read_text() == original
    assert elsewhere.read_text() == "not a backup\n"


def test_a_project_profile_skipped_as_untrusted_is_never_edited_either(tmp_path):
    """A world-writable ./gpudoc.toml is skipped when profiles are looked up; `fix --apply` would
    otherwise write the next rung into it, whoever put it there (SPEC "Trust")."""
    import os

    from gpudoc.profiles.model import EMPTY
    from gpudoc.trust import Refused

    planted = write(tmp_path / "gpudoc.toml", PROFILE)
    os.chmod(planted, 0o666)
    with pytest.raises(Refused, match=r"can be written by every user \(mode 0666\): gpudoc will not edit it"):
        apply_changes(EMPTY, HALVE, cwd=tmp_path)
    assert planted.read_text() == PROFILE and not (tmp_path / "gpudoc.toml.gpudoc.bak").exists()


# -- no edit overwrites bytes no backup holds; a read-only profile is the user's "do not edit" ----

OOM_PROFILE = "[train]\nmicro_batch_size = 16\ngradient_accumulation_steps = 2\n\n[bind]\nenv = true\n"


def _oom_log(tmp_path: Path) -> Path:
    import os
    import subprocess
    import sys

    job = Path(__file__).parents[1] / "commands" / "oom_job.py"
    log = tmp_path / "oom.log"
    with open(log, "w") as handle:
        subprocess.run([sys.executable, str(job)], stdout=handle, stderr=subprocess.STDOUT, check=False,
                       env={**os.environ, "GPUDOC_MICRO_BATCH_SIZE": "16"})
    return log


def test_an_apply_never_overwrites_a_hand_edit_that_no_backup_holds(tmp_path):
    """An older backup (an earlier chain's) holds other bytes than the profile now: the user edited
    it by hand since. `fix --log --apply` has no run to list the edit, yet the hand edit is kept
    (in the run store's originals, by its fingerprint) before the profile is written; the first
    backup stays as it was. Where nothing can keep them, the edit is refused in one line."""
    import hashlib

    profile = tmp_path / "gpudoc.toml"
    hand = OOM_PROFILE + "# tuned by hand, held by no backup\n"
    profile.write_text(hand)
    older = tmp_path / "gpudoc.toml.gpudoc.bak"
    older.write_text(OOM_PROFILE.replace("16", "32"))
    log = _oom_log(tmp_path)
    done = gpudoc_cli("fix", "--log", str(log), "--apply", cwd=tmp_path)
    assert done.returncode == 0 and "micro_batch_size = 8" in profile.read_text(), done.stderr
    assert older.read_text() == OOM_PROFILE.replace("16", "32")
    kept = tmp_path / ".gpudoc" / "originals" / "unlisted" / hashlib.sha256(hand.encode()).hexdigest()
    assert kept.read_text() == hand

    profile.write_text(hand)  # by hand again, and now no store can keep anything (its place is a file)
    (tmp_path / "not-a-folder").write_text("")
    refused = gpudoc_cli("fix", "--log", str(log), "--apply", cwd=tmp_path,
                         env={"GPUDOC_HOME": str(tmp_path / "not-a-folder")})
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and profile.read_text() == hand
    assert f"gpudoc: {profile}: changed since its backup {older} was made" in refused.stderr, refused.stderr


def test_what_a_log_apply_keeps_is_pruned_by_runs_keep_and_said(tmp_path):
    """`fix --log --apply` makes no run record: the hand edits it keeps (no backup holds them) go by
    [runs] keep, counted like records, when the next such edit keeps one more."""
    import hashlib

    profile = tmp_path / "gpudoc.toml"
    (tmp_path / "gpudoc.toml.gpudoc.bak").write_text(OOM_PROFILE.replace("16", "32"))  # an earlier chain's
    log = _oom_log(tmp_path)
    unlisted = tmp_path / ".gpudoc" / "originals" / "unlisted"
    hands = [OOM_PROFILE + f"[runs]\nkeep = 1\n# tuned by hand, take {take}\n" for take in (1, 2)]
    for hand in hands:
        profile.write_text(hand)
        done = gpudoc_cli("fix", "--log", str(log), "--apply", cwd=tmp_path)
        assert done.returncode == 0 and "micro_batch_size = 8" in profile.read_text(), done.stderr
    kept = unlisted / hashlib.sha256(hands[1].encode()).hexdigest()
    assert list(unlisted.iterdir()) == [kept]
    said = done.stdout + done.stderr
    assert f"{profile} as it was is kept in {kept} (its backup holds an earlier state)" in said, said
    assert "removed the 1 oldest file state(s) kept before edits no run lists" in said, said
    assert "beyond [runs] keep = 1" in said and str(unlisted) in said


def test_a_read_only_profile_is_refused_in_one_line(tmp_path):
    import os

    profile = tmp_path / "gpudoc.toml"
    profile.write_text(OOM_PROFILE)
    os.chmod(profile, 0o444)
    done = gpudoc_cli("fix", "--log", str(_oom_log(tmp_path)), "--apply", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert profile.read_text() == OOM_PROFILE and os.stat(profile).st_mode & 0o777 == 0o444
    assert f"gpudoc: {profile}: read-only (mode 0444): gpudoc will not edit it" in done.stderr
    assert not (tmp_path / "gpudoc.toml.gpudoc.bak").exists()
