"""LightningCLI read before launch by jsonargparse in the job's interpreter: two ``--config`` layers
and flags composed as LightningCLI composes them (a class's ``init_args`` merged across files), the
Trainer's defaults by installed version, a batch that only the job's own class knows said to be
unknown; the edit re-parsed by the real LightningCLI; gpudoc's own reader, saying so, where
jsonargparse cannot be imported.

The helper imports the Trainer (torch, seconds): two readings ask it, in one directory with one
cache for the module, and one real LightningCLI process checks both the reading and the edit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpudoc.frameworks import asked
from gpudoc.job.knobs import read_job
from gpudoc.readhelper import main as helper
from tests.conftest import CONFIGS, VENV_BIN, gpudoc_cli
from tests.frameworks.test_reading import _plan

pytestmark = pytest.mark.slow

# The job's own classes: LightningCLI imports them, gpudoc never does.
CLASSES = """\
import lightning.pytorch as pl


class TinyModel(pl.LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()


class TinyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, workers: int = 0):
        super().__init__()
"""
BASE = ("trainer:\n  max_steps: 1\n  accumulate_grad_batches: 2\nmodel:\n  class_path: tinyjob.TinyModel\n"
        "data:\n  class_path: tinyjob.TinyData\n  init_args:\n    batch_size: 8  # per GPU\n")
BIG = "trainer:\n  precision: bf16-mixed\ndata:\n  init_args:\n    batch_size: 16\n"
NO_BATCH = "model:\n  class_path: tinyjob.TinyModel\ndata:\n  class_path: tinyjob.TinyData\n"
COMMAND = [sys.executable, "main.py", "fit", "--config", "base.yaml", "--config", "big.yaml",
           "--trainer.accumulate_grad_batches=4", "--trainer.devices", "2"]
# The real LightningCLI's composition of each command line given (one process for all).
TRUTH = """\
import contextlib, io, json, sys
import yaml
from lightning.pytorch.cli import LightningCLI

out = []
for argv in json.loads(sys.argv[1]):
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.suppress(SystemExit):
        LightningCLI(args=[*argv, "--print_config"])
    out.append(yaml.safe_load(said.getvalue()))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lightning-job")
    for name, text in {"tinyjob.py": CLASSES, "base.yaml": BASE, "big.yaml": BIG, "nobatch.yaml": NO_BATCH,
                       "main.py": "from lightning.pytorch.cli import LightningCLI\n\nLightningCLI()\n",
                       "truth.py": TRUTH}.items():
        (root / name).write_text(text)
    return root


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "lightning-read-cache"))


def _lightning_cli(job: Path, *argvs: list[str]) -> list[dict]:
    done = subprocess.run([sys.executable, "truth.py", json.dumps(argvs)], cwd=job, capture_output=True, text=True,
                          timeout=120, env={"PATH": VENV_BIN, "PYTHONPATH": str(job)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_two_configs_and_flags_are_composed_as_lightningcli_does_and_edited_with_a_flag(job):
    reading = read_job(COMMAND, job)
    assert reading.framework == "lightning" and reading.version == version("lightning")
    # big.yaml's init_args merge into base.yaml's class (the hand-written reader took big.yaml alone).
    assert reading.values == {"micro_batch_size": 16, "gradient_accumulation_steps": 4, "precision": "bf16"}
    assert reading.places == {"micro_batch_size": "argv:--data.init_args.batch_size",
                              "gradient_accumulation_steps": "argv:--trainer.accumulate_grad_batches",
                              "precision": "file:big.yaml:trainer.precision"}
    assert any("data.init_args.batch_size, set by base.yaml then big.yaml" in n for n in reading.notes)
    assert reading.launch == {"nproc_per_node": 2, "nnodes": 1}  # the Trainer's own processes
    plan = _plan(COMMAND, job, micro_batch_size=4, gradient_accumulation_steps=8)
    assert plan.file_edits == []  # neither file: base.yaml's 8 is overridden by big.yaml
    assert plan.argv == [*COMMAND[:-3], "--trainer.accumulate_grad_batches=8", *COMMAND[-2:], "--data.batch_size", "4"]
    before, after = _lightning_cli(job, COMMAND[2:], plan.argv[2:])
    assert (before["data"]["init_args"]["batch_size"], before["trainer"]["accumulate_grad_batches"]) == (16, 4)
    assert before["trainer"]["precision"] == "bf16-mixed" and before["model"]["class_path"] == "tinyjob.TinyModel"
    assert (after["data"]["init_args"]["batch_size"], after["trainer"]["accumulate_grad_batches"]) == (4, 8)


def test_the_answer_is_cached_and_dry_run_json_reads_it(job, monkeypatch):
    request = {"framework": "lightning", "args": COMMAND[2:], "cwd": str(job.resolve())}
    files = [job / "base.yaml", job / "big.yaml"]
    # Asked once (the test before, in this worker, may have asked already: then this is cached too),
    # then again by a process that has not seen the answer: it comes from the cache on disk.
    monkeypatch.setattr(asked, "_ANSWERED", {})
    first = asked.ask(request, python=sys.executable, cwd=job, files=files)
    monkeypatch.setattr(asked, "_ANSWERED", {})
    again = asked.ask(request, python=sys.executable, cwd=job, files=files)
    assert again.get("cached") is True and again["config"] == first["config"]  # no Trainer import this time
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *COMMAND, cwd=job)
    assert done.returncode == 0, done.stderr
    bindings = {b["knob"]: (b["where"], b["old"]) for b in json.loads(done.stdout)["bindings"]}
    assert bindings["micro_batch_size"] == ("argv:--data.init_args.batch_size", 16)
    assert bindings["precision"] == ("file:big.yaml:trainer.precision", "bf16")


def test_a_batch_only_the_jobs_class_knows_is_unknown_and_the_trainer_defaults_are_the_installed_ones(job):
    reading = read_job([sys.executable, "main.py", "fit", "--config", "nobatch.yaml"], job)
    assert "micro_batch_size" not in reading.values  # TinyData's 32 is in the job's code: not guessed
    [note] = [n for n in reading.notes if "micro_batch_size is unknown" in n]
    assert "data (tinyjob.TinyData)" in note
    # Lightning 2's Trainer: precision None (32-true), accumulate_grad_batches 1.
    assert reading.values == {"gradient_accumulation_steps": 1, "precision": "fp32"}
    assert reading.places == {"gradient_accumulation_steps": "default:lightning", "precision": "default:lightning"}
    assert reading.launch == {}  # devices: auto, every GPU found at launch


def test_without_jsonargparse_importable_gpudocs_own_reader_reads_and_says_so(tmp_path):
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "big.yaml").write_text(BIG)
    python = tmp_path / "python"  # the job's interpreter, without site-packages: no jsonargparse
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    reading = read_job([str(python), *COMMAND[1:]], tmp_path)
    assert reading.framework == "lightning" and reading.values["micro_batch_size"] == 16
    [note] = [n for n in reading.notes if "jsonargparse could not be asked" in n]
    assert "lightning is not importable here (No module named" in note and "gpudoc's own reader" in note


def test_a_command_jsonargparse_refuses_is_said_to_be_refused_by_lightningcli_too(tmp_path):
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "big.yaml").write_text(BIG)
    # The job's interpreter answers as the helper does when jsonargparse refuses a layer's key.
    refusal = {"ok": False, "reason": "ArgumentError: Group 'trainer' does not accept option 'accumulate_grad_batchez'"}
    python = tmp_path / "python"
    (tmp_path / "answer").write_text(f"{helper.MARKER}{json.dumps(refusal)}\n")
    python.write_text(f"#!/bin/sh\ncat >/dev/null\ncat {tmp_path / 'answer'}\n")
    python.chmod(0o755)
    reading = read_job([str(python), *COMMAND[1:]], tmp_path)
    [note] = [n for n in reading.notes if "refuses" in n]
    assert note.startswith("lightning: jsonargparse refuses the command (Group 'trainer' does not accept option "
                           "'accumulate_grad_batchez'), and so will LightningCLI; read by gpudoc's own reader")


VOCOS = CONFIGS.parent / "heldout" / "vocos__configs__vocos.yaml"


def _vocos(root: Path) -> list[str]:
    (root / "configs").mkdir()
    shutil.copy(VOCOS, root / "configs" / "vocos.yaml")
    shutil.copy(CONFIGS.parent / "standins" / "lightning_cli_script.py", root / "train.py")
    return [sys.executable, "train.py", "-c", "configs/vocos.yaml"]  # Vocos's README: `python train.py -c ...`


def test_a_data_module_whose_training_batch_sits_in_its_own_settings_is_read_there(tmp_path):
    # Vocos's config: data.init_args.train_params.batch_size 16 beside val_params.batch_size 16.
    command = _vocos(tmp_path)
    reading = read_job(command, tmp_path)
    assert reading.values["micro_batch_size"] == 16
    assert reading.places["micro_batch_size"] == "file:configs/vocos.yaml:data.init_args.train_params.batch_size"
    plan = _plan(command, tmp_path, micro_batch_size=8)
    [edit] = plan.file_edits
    data = YAML(typ="safe").load(edit.new_text)["data"]["init_args"]
    assert (data["train_params"]["batch_size"], data["val_params"]["batch_size"]) == (8, 16)
    # gpudoc's own reader, where jsonargparse cannot be asked, finds it as well.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    reading = read_job([str(python), *command[1:]], tmp_path)
    assert reading.places["micro_batch_size"] == "file:configs/vocos.yaml:data.init_args.train_params.batch_size"
