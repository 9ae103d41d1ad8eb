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


def _lightning_precisions() -> set[object]:
    """The precisions the installed Lightning's Trainer takes (its ``_PRECISION_INPUT*`` literals), read
    from its source without importing it (that would import torch)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("lightning")
    assert spec is not None and spec.submodule_search_locations
    source = Path(spec.submodule_search_locations[0]) / "fabric" / "plugins" / "precision" / "precision.py"
    out: set[object] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "").startswith("_PRECISION_INPUT") \
                and isinstance(node.value, ast.Subscript) and ast.unparse(node.value.value) == "Literal":
            elts = node.value.slice.elts if isinstance(node.value.slice, ast.Tuple) else [node.value.slice]
            out.update(e.value for e in elts if isinstance(e, ast.Constant))
    assert "bf16-mixed" in out
    return out


def test_a_lightning_trainer_without_precision_runs_32_true_and_is_changed_in_the_releases_spelling(template):
    # The template's README: `python train.py trainer=gpu`; trainer/default.yaml only comments `# precision: 16`:
    # the Trainer's own default, "32-true" in Lightning 2 (the release installed here), is the job's.
    command = ["python", "src/train.py", "trainer=gpu"]
    reading = read_job(command, template)
    assert reading.values["precision"] == "fp32" and reading.places["precision"] == "argv:+trainer.precision"
    assert any("sets no accumulate_grad_batches = 1, precision = 32-true" in n for n in reading.notes)
    plan = _plan(command, template, precision="bf16")
    assert plan.file_edits == [] and plan.argv == [*command, "+trainer.precision=bf16-mixed"]
    composed = _compose(template, plan.argv[2:])["trainer"]["precision"]
    assert composed == "bf16-mixed" and composed in _lightning_precisions()  # what Lightning's Trainer takes
    # One the command appends (the README's `+trainer.precision=16`) is read there and rewritten there.
    command = ["python", "src/train.py", "trainer=gpu", "+trainer.precision=16"]
    assert read_job(command, template).values["precision"] == "fp16"
    assert _plan(command, template, precision="fp32").argv == [*command[:3], "+trainer.precision=32-true"]


def test_a_precision_the_file_holds_as_a_number_is_changed_by_an_override_of_the_composed_key(tmp_path):
    # trainer/default.yaml with its `# precision: 16` line uncommented, as its comment offers: Lightning 2
    # still takes the number, but "bf16-mixed" is a string, no number to write over it.
    shutil.copytree(TEMPLATE, tmp_path, dirs_exist_ok=True)
    trainer = tmp_path / "configs" / "trainer" / "default.yaml"
    trainer.write_text(trainer.read_text().replace("# precision: 16", "precision: 16"))
    command = ["python", "src/train.py"]
    reading = read_job(command, tmp_path)
    assert reading.values["precision"] == "fp16" and reading.places["precision"] == "argv:trainer.precision"
    assert any("configs/trainer/default.yaml holds trainer.precision as the number 16" in n for n in reading.notes)
    plan = _plan(command, tmp_path, precision="bf16")
    assert plan.file_edits == [] and plan.argv == [*command, "trainer.precision=bf16-mixed"]
    assert _compose(tmp_path, plan.argv[2:])["trainer"]["precision"] == "bf16-mixed"


def test_a_job_pinning_lightning_before_2_gets_its_precision_spelled_as_that_release_takes_it(template, tmp_path):
    """The job's interpreter has Lightning 1.9.5 (and the Hydra of this environment): its Trainer takes 16,
    32 or "bf16" (1.9's ``_PRECISION_INPUT``), and refuses 2.x's "bf16-mixed"."""
    import subprocess
    import sysconfig

    venv = tmp_path / "pl19"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "lightning-1.9.5.dist-info").mkdir()
    (site / "this-env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    command = [str(venv / "bin" / "python"), "src/train.py", "trainer=gpu"]
    reading = read_job(command, template)
    assert reading.values["precision"] == "fp32"
    assert any("(lightning.pytorch.trainer.Trainer 1.9.5) and sets no accumulate_grad_batches = 1, precision = 32"
               in n for n in reading.notes)
    assert _plan(command, template, precision="bf16").argv == [*command, "+trainer.precision=bf16"]
    assert _plan(command, template, precision="fp16").argv == [*command, "+trainer.precision=16"]
    from gpudoc.errors import ProfileError

    with pytest.raises(ProfileError, match=r'"bf16-true" has no entry in the map for \+trainer.precision \(it maps fp32, '
                                           r'fp16, bf16\)'):
        _plan(command, template, precision="bf16-true")


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
