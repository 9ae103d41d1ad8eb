"""`gpudoc profile` through the real CLI."""

from __future__ import annotations

import json

from tests.conftest import NVIDIA_SMI, gpudoc_cli


def test_list_shows_shipped_profiles_with_descriptions():
    result = gpudoc_cli("profile", "list")
    assert result.returncode == 0, result.stderr
    line = next(row for row in result.stdout.splitlines() if row.startswith("gpu-24gb "))
    assert "shipped" in line and "A10G" in line


def test_list_json_marks_project_profiles(isolated_home):
    (isolated_home / ".gpudoc" / "profiles").mkdir(parents=True)
    (isolated_home / ".gpudoc" / "profiles" / "mine.toml").write_text('description = "my box"\n')
    doc = json.loads(gpudoc_cli("profile", "list", "--json", cwd=isolated_home).stdout)
    assert doc["command"] == "profile list" and doc["exit_code"] == 0
    rows = doc["profiles"]
    mine = next(r for r in rows if r["name"] == "mine")
    assert mine["origin"] == "project" and mine["description"] == "my box"


def test_show_resolves_extends():
    result = gpudoc_cli("profile", "show", "qwen2.5-7b-lora-24gb", "--json")
    data = json.loads(result.stdout)["profile"]
    assert data["knobs"]["lora_rank"] == 128
    assert data["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"
    assert data["env"]["TOKENIZERS_PARALLELISM"] == "false"
    assert data["global_batch_size"] == 16


def test_show_bad_profile_is_one_line_exit_2(isolated_home):
    (isolated_home / "bad.toml").write_text("[gpu]\ncuont = 2\n")
    result = gpudoc_cli("profile", "show", "bad.toml", cwd=isolated_home)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "bad.toml:2: gpu.cuont: unknown key (did you mean 'count'?)" in result.stderr


def test_new_writes_a_valid_profile_and_refuses_to_overwrite(isolated_home):
    result = gpudoc_cli("profile", "new", "box", cwd=isolated_home)
    assert result.returncode == 0, result.stderr
    shown = gpudoc_cli("profile", "show", "box", "--json", cwd=isolated_home)
    assert json.loads(shown.stdout)["profile"]["knobs"]["micro_batch_size"] == 1
    again = gpudoc_cli("profile", "new", "box", cwd=isolated_home)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_new_from_gpu_reads_a_real_snapshot(isolated_home):
    snapshot = NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"
    result = gpudoc_cli("profile", "new", "a5000s", "--from-gpu", "--snapshot", str(snapshot), cwd=isolated_home)
    assert result.returncode == 0, result.stderr
    data = json.loads(gpudoc_cli("profile", "show", "a5000s", "--json", cwd=isolated_home).stdout)["profile"]
    assert data["gpu"]["count"] == 2
    assert "A5000" in data["gpu"]["name"]
    # 24564 MiB cards: 23.99 GiB, nearest tier at or below is the 22.5 GiB one.
    assert abs(data["gpu"]["memory_gib"] - 23.99) < 0.01
    assert data["extends_chain"][1].endswith("gpu-24gb.toml")


def test_new_from_gpu_without_a_driver_fails_cleanly(isolated_home):
    result = gpudoc_cli("profile", "new", "x", "--from-gpu", cwd=isolated_home)
    assert result.returncode == 1
    assert "no GPU to read" in result.stderr
    assert "Traceback" not in result.stderr


def test_new_from_run_takes_the_run_id_it_is_given(tmp_path):
    import shutil
    import sys
    from pathlib import Path

    from tests.conftest import gpudoc_cli

    shutil.copy(Path(__file__).with_name("jobs") / "nanogpt_config.py", tmp_path / "train.py")
    (tmp_path / "cfg.py").write_text("batch_size = 32\n")
    for _ in range(2):  # the named run is the older one: not the latest by chance
        gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", "cfg.py", cwd=tmp_path)
        (tmp_path / "cfg.py").write_text("batch_size = 8\n")
    older = sorted(p.name for p in (tmp_path / ".gpudoc" / "runs").iterdir())[0]
    made = gpudoc_cli("profile", "new", "mine", "--from-run", older, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / ".gpudoc" / "profiles" / "mine.toml").read_text()
    assert f"\n# Read by gpudoc from run {older}: " in text and "micro_batch_size = 32 # file:cfg.py:batch_size" in text
    stray = gpudoc_cli("profile", "new", "other", older, cwd=tmp_path)
    assert stray.returncode == 2 and "a RUN_ID goes with --from-run" in stray.stderr


def test_new_force_keeps_what_it_replaces_and_says_where(isolated_home):
    """The first backup is kept and never written through a link planted in its place; a profile
    changed by hand since that backup is kept in the run store's unlisted originals, named."""
    import hashlib

    target = isolated_home / ".gpudoc" / "profiles" / "box.toml"
    backup = target.with_name("box.toml.gpudoc.bak")
    assert gpudoc_cli("profile", "new", "box", cwd=isolated_home).returncode == 0
    victim = isolated_home / "victim.txt"
    victim.write_text("not gpudoc's\n")
    backup.symlink_to(victim)  # planted where the backup goes
    first = target.read_text() + "# mine, take 1\n"
    target.write_text(first)
    done = gpudoc_cli("profile", "new", "box", "--force", cwd=isolated_home)
    assert done.returncode == 0, done.stderr
    assert f"the profile it replaced is kept in {backup}" in done.stdout
    assert not backup.is_symlink() and backup.read_text() == first and victim.read_text() == "not gpudoc's\n"
    assert "# mine" not in target.read_text()

    second = target.read_text() + "# mine, take 2\n"
    target.write_text(second)
    again = gpudoc_cli("profile", "new", "box", "--force", cwd=isolated_home)
    assert again.returncode == 0, again.stderr
    kept = isolated_home / ".gpudoc" / "originals" / "unlisted" / hashlib.sha256(second.encode()).hexdigest()
    assert f"the profile it replaced is kept in {kept}" in again.stdout
    assert kept.read_text() == second and backup.read_text() == first  # the first backup is kept


def test_new_force_refuses_a_read_only_profile_in_one_line(isolated_home):
    import os

    assert gpudoc_cli("profile", "new", "box", cwd=isolated_home).returncode == 0
    target = isolated_home / ".gpudoc" / "profiles" / "box.toml"
    mine = target.read_text() + "# mine\n"
    target.write_text(mine)
    target.chmod(0o444)
    refused = gpudoc_cli("profile", "new", "box", "--force", cwd=isolated_home)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert f"gpudoc: {target}: read-only (mode 0444): gpudoc will not edit it" in refused.stderr
    assert target.read_text() == mine and os.stat(target).st_mode & 0o777 == 0o444
    assert not target.with_name("box.toml.gpudoc.bak").exists()
