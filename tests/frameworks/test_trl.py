"""TRL's CLI (``trl sft|dpo --config x.yaml --flag value``): its YAML, its flags over it, and its
config classes' defaults for the release installed where the job runs."""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.job.installed import parse_version
from gpudoc.job.knobs import read_job
from gpudoc.profiles.from_job import job_profile
from tests.conftest import CONFIGS, gpudoc_cli

EXAMPLE = CONFIGS / "trl__examples__cli_configs__example_config.yaml"  # no knob: every one a default


@pytest.fixture(scope="module")
def trl_env(tmp_path_factory):
    """A virtual environment with a ``trl`` console script and TRL's dist-info, per release."""
    made = {}

    def make(release: str) -> Path:
        if release not in made:
            # A virtual environment's layout, as `python -m venv` lays it out (without running it).
            venv = tmp_path_factory.mktemp(f"trl-{release}")
            (venv / "bin").mkdir()
            (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
            (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
            site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
            site.mkdir(parents=True)
            (site / f"trl-{release}.dist-info").mkdir()
            (site / f"trl-{release}.dist-info" / "METADATA").write_text(f"Name: trl\nVersion: {release}\n")
            script = venv / "bin" / "trl"
            script.write_text(f"#!{venv / 'bin' / 'python'}\nfrom trl.cli import main\nmain()\n")
            script.chmod(0o755)
            made[release] = venv / "bin"
        return made[release]
    return make


def _read(bin_dir: Path, cwd: Path, *flags: str) -> dict:
    command = ["trl", "sft", "--config", "config.yaml", "--output_dir", "test-sft", *flags]  # its comment's line
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *command, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}


def test_the_installed_releases_defaults_are_read_through_the_dry_run(tmp_path, trl_env):
    shutil.copy(EXAMPLE, tmp_path / "config.yaml")
    # 0.21: SFTConfig trains in bf16 unless fp16 (since 0.19), the Trainer's gradient checkpointing off.
    assert _read(trl_env("0.21.0"), tmp_path) == {
        "micro_batch_size": (8, "default:trl"), "gradient_accumulation_steps": (1, "default:trl"),
        "max_seq_len": (1024, "default:trl"), "gradient_checkpointing": (False, "default:trl"),
        "precision": ("bf16", "default:trl")}
    # 0.22 turned gradient checkpointing on; 0.18 trained in fp32 (read in-process: one CLI run is enough).
    from gpudoc.job.knobs import read_job

    for release, knob, value in (("0.22.2", "gradient_checkpointing", True), ("0.18.1", "precision", "fp32")):
        command = [str(trl_env(release) / "trl"), "sft", "--config", "config.yaml"]
        reading = read_job(command, tmp_path)
        assert (reading.version, reading.values[knob], reading.places[knob]) == (release, value, "default:trl")


def test_flags_beat_the_yaml_and_an_unknown_release_leaves_its_changed_defaults_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `trl` to find: TRL's parser cannot be asked, gpudoc reads by hand
    shutil.copy(EXAMPLE, tmp_path / "config.yaml")
    with (tmp_path / "config.yaml").open("a") as handle:
        handle.write("per_device_train_batch_size: 2\ngradient_accumulation_steps: 4\nmax_length: 2048\n")
    command = ["trl", "dpo", "--config", "config.yaml", "--per_device_train_batch_size", "4", "--fp16",
               "--num_processes", "8", "--num_machines", "2"]
    profile = job_profile(command, tmp_path, {"PATH": str(tmp_path)})
    assert profile.job is not None and profile.job.framework == "trl"
    assert profile.job.places == {"micro_batch_size": "argv:--per_device_train_batch_size",
                                  "gradient_accumulation_steps": "file:config.yaml:gradient_accumulation_steps",
                                  "max_seq_len": "file:config.yaml:max_length", "precision": "argv:--fp16"}
    assert profile.train["micro_batch_size"] == 4 and profile.train["precision"] == "fp16"
    assert profile.launch == {"nproc_per_node": 4, "nnodes": 2}  # accelerate's num_processes is the total
    assert any("no installed release found" in note for note in profile.job.notes)
    assert any(note.startswith("trl: TRL's own parser could not be asked") and note.endswith("gpudoc's own reader")
               for note in profile.job.notes)
    # A rung's changes: the flag in place, the YAML's key in the YAML, the precision as two flags.
    changed = profile.with_train({"micro_batch_size": 2, "gradient_accumulation_steps": 8, "precision": "bf16"})
    plan = plan_bindings(changed.for_planning(), command, cwd=tmp_path)
    assert plan.argv[:6] == ["trl", "dpo", "--config", "config.yaml", "--per_device_train_batch_size", "2"]
    assert plan.argv[6:] == ["--fp16=false", "--num_processes", "8", "--num_machines", "2", "--bf16", "true"]
    (edit,) = plan.file_edits
    assert edit.changes == [{"key": "gradient_accumulation_steps", "old": 4, "new": 8}]


def test_the_installed_trl_parses_the_command_with_its_own_config_class(tmp_path, monkeypatch):
    # The TRL of the project's environment (its test extra): `trl sft`'s own TrlParser over SFTConfig.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copy(EXAMPLE, tmp_path / "config.yaml")
    with (tmp_path / "config.yaml").open("a") as handle:
        handle.write("gradient_accumulation_steps: 4\n")
    command = ["trl", "sft", "--config", "config.yaml", "--per_device_train_batch_size", "4", "--fp16"]
    reading = read_job(command, tmp_path)
    installed = version("trl")
    release = parse_version(installed)
    assert reading.version == installed and release is not None
    assert reading.places == {"micro_batch_size": "argv:--per_device_train_batch_size",
                              "gradient_accumulation_steps": "file:config.yaml:gradient_accumulation_steps",
                              "max_seq_len": "default:trl", "gradient_checkpointing": "default:trl",
                              "precision": "argv:--fp16"}
    assert reading.values["gradient_checkpointing"] is (release >= (0, 22))
    assert reading.values["precision"] == "fp16"  # --fp16 turns SFTConfig's bf16-unless-fp16 off
    # Its declared flags decide the spelling written: SFT's length is --max_length from 0.17.
    assert reading.declared is not None and "--max_length" in reading.declared
    assert ("--max_seq_length" in reading.declared) is (release < (0, 17))


def test_conda_run_reads_the_release_installed_in_that_environment(tmp_path, trl_env, monkeypatch):
    # `trl` on gpudoc's PATH is the project's; the job runs the one in the conda environment.
    python = trl_env("0.18.1") / "python"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "conda").write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "run -n old" ] && echo "{python}"\n')
    (bin_dir / "conda").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    shutil.copy(EXAMPLE, tmp_path / "config.yaml")
    reading = read_job(["conda", "run", "-n", "old", "trl", "sft", "--config", "config.yaml"], tmp_path)
    # That environment has no transformers to ask: its TRL release, read from its layout, gives the defaults.
    assert reading.framework == "trl" and reading.version == "0.18.1"
    assert (reading.values["precision"], reading.values["gradient_checkpointing"]) == ("fp32", False)
    assert any("TRL's own parser could not be asked" in note for note in reading.notes)
