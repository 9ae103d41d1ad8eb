"""Hydra's own composition read before launch: a verbatim project (ashleve/lightning-hydra-template,
see tests/fixtures/real/SOURCES.md) composed by the installed Hydra with the command's group options,
``experiment=``, interpolations and ``+`` overrides; the edit written in Hydra's syntax and
composed again by Hydra; gpudoc's own reader when Hydra cannot answer, saying so.

The answers are cached in one directory for the module: a command read twice asks Hydra once."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pytest

from gpudoc.frameworks import asked
from gpudoc.job.knobs import read_job
from tests.conftest import FIXTURES, gpudoc_cli
from tests.frameworks.test_reading import _plan

TEMPLATE = FIXTURES / "real" / "lightning-hydra-template"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("read-cache")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("template")
    shutil.copytree(TEMPLATE, root, dirs_exist_ok=True)
    return root


@pytest.fixture(autouse=True)
def _shared_cache(cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


def _compose(root: Path, overrides: list[str]) -> dict:
    """What Hydra composes for these overrides (the job's own parser, asked as gpudoc asks it)."""
    return asked.ask({"framework": "hydra", "config_dir": str(root / "configs"), "config_name": "train",
                      "overrides": overrides, "version_base": "1.3"},
                     python=sys.executable, cwd=root, files=(root / "configs").rglob("*.yaml"))["config"]


def test_an_experiment_on_the_command_line_is_read_and_changed_by_an_override(template):
    command = ["python", "src/train.py", "experiment=example"]
    reading = read_job(command, template)
    # experiment/example.yaml sets 64 over data/mnist.yaml's 128: the hand-written reader said 128.
    assert reading.values["micro_batch_size"] == 64
    assert reading.places["micro_batch_size"] == "argv:data.batch_size"
    assert any("data.batch_size, from experiment=example on the command line" in n for n in reading.notes)
    # hydra/default.yaml asks for hydra-colorlog, not installed: the job would stop there, the reading does not.
    assert any("Could not find 'hydra/job_logging/colorlog'" in n and "and so will the job" in n for n in reading.notes)
    plan = _plan(command, template, micro_batch_size=32)
    assert plan.file_edits == []  # neither mnist.yaml nor example.yaml
    assert plan.argv == [*command, "data.batch_size=32"]
    composed = _compose(template, plan.argv[2:])  # Hydra takes the edited command as the job will
    assert composed["data"]["batch_size"] == 32


def test_the_default_composition_edits_the_group_file_it_composes(template):
    reading = read_job(["python", "src/train.py"], template)
    assert reading.values["micro_batch_size"] == 128
    assert reading.places["micro_batch_size"] == "file:configs/data/mnist.yaml:batch_size"
    [edit] = _plan(["python", "src/train.py"], template, micro_batch_size=32).file_edits
    assert edit.path.name == "mnist.yaml" and edit.changes == [{"key": "batch_size", "old": 128, "new": 32}]
    assert "batch_size: 32 # Needs to be divisible" in edit.new_text  # the comment kept


def test_dry_run_json_reads_the_composed_config(template):
    done = gpudoc_cli("run", "--dry-run", "--json", "--", "python", "src/train.py", "experiment=example",
                      cwd=template)
    assert done.returncode == 0, done.stderr
    [binding] = [b for b in json.loads(done.stdout)["bindings"] if b["knob"] == "micro_batch_size"]
    assert binding == {"knob": "micro_batch_size", "file": "command", "key": "data.batch_size", "old": 64, "new": 64,
                       "added": False, "where": "argv:data.batch_size"}
    assert "composed by Hydra" in done.stderr


def test_a_lightning_trainer_without_accumulation_runs_its_default_changed_by_an_appending_override(template):
    # The template's README: `python train.py trainer=gpu`; trainer/gpu.yaml (over default.yaml) is
    # Lightning's Trainer and sets no accumulate_grad_batches: the Trainer's 1.
    command = ["python", "src/train.py", "trainer=gpu"]
    reading = read_job(command, template)
    assert reading.values["gradient_accumulation_steps"] == 1
    assert reading.places["gradient_accumulation_steps"] == "argv:+trainer.accumulate_grad_batches"
    plan = _plan(command, template, gradient_accumulation_steps=2)
    assert plan.file_edits == [] and plan.argv == [*command, "+trainer.accumulate_grad_batches=2"]
    assert _compose(template, plan.argv[2:])["trainer"]["accumulate_grad_batches"] == 2
    # One the command already appends is read there and changed there.
    command = ["python", "src/train.py", "+trainer.accumulate_grad_batches=10"]
    assert read_job(command, template).values["gradient_accumulation_steps"] == 10
    plan = _plan(command, template, gradient_accumulation_steps=20)
    assert _compose(template, plan.argv[2:])["trainer"]["accumulate_grad_batches"] == 20


def _project(root: Path, config: str, script_head: str = "") -> None:
    (root / "conf").mkdir()
    (root / "conf" / "config.yaml").write_text(config)
    (root / "train.py").write_text(
        f"import hydra\n{script_head}\n@hydra.main(config_path=\"conf\", config_name=\"config\", version_base=None)\n"
        "def main(cfg):\n    print(cfg)\n")


def test_an_interpolated_batch_is_resolved_and_changed_by_an_override(tmp_path):
    _project(tmp_path, "bs: 32\ndata:\n  batch_size: ${bs}\n")
    command = ["python", "train.py", "bs=16"]
    reading = read_job(command, tmp_path)
    assert reading.values["micro_batch_size"] == 16
    assert reading.places["micro_batch_size"] == "argv:data.batch_size"  # not the file's ${bs}
    assert any("${bs} in the config" in n for n in reading.notes)
    assert _plan(command, tmp_path, micro_batch_size=8).argv == [*command, "data.batch_size=8"]


def test_a_structured_config_of_the_jobs_own_code_is_a_note(tmp_path):
    _project(tmp_path, "", "from hydra.core.config_store import ConfigStore\n"
                           "ConfigStore.instance().store(name=\"cfg\", node={\"batch_size\": 8})\n")
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text().replace('"config"', '"cfg"'))
    reading = read_job(["python", "train.py", "batch_size=4"], tmp_path)
    assert reading.places == {"micro_batch_size": "argv:batch_size"}  # the command's override, read by hand
    [note] = [n for n in reading.notes if "could not compose" in n]
    assert "structured config the job's own code registers (ConfigStore)" in note


def test_without_hydra_importable_gpudocs_own_reader_reads_and_says_so(tmp_path, monkeypatch):
    _project(tmp_path, "defaults:\n  - trainer: small\n  - _self_\n")
    (tmp_path / "conf" / "trainer").mkdir()
    (tmp_path / "conf" / "trainer" / "small.yaml").write_text("batch_size: 2\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"  # the job's interpreter, without site-packages: no Hydra
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    reading = read_job(["python", "train.py"], tmp_path)
    assert reading.places == {"micro_batch_size": "file:conf/trainer/small.yaml:batch_size"}
    [note] = reading.notes
    assert note.startswith("hydra: Hydra could not compose config (hydra is not importable here")
    assert "read by gpudoc's own reader" in note
