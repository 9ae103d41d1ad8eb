"""Which commands are LightningCLI's: a ``--config`` alone (a ``run=False`` script, or a config
before the subcommand) is read only with evidence; a plain script's ``--config`` is left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.job.knobs import read_job
from gpudoc.profiles.from_job import job_profile

CFG = "trainer:\n  accumulate_grad_batches: 2\ndata:\n  batch_size: 8  # per GPU\n"
NESTED = "fit:\n  trainer:\n    accumulate_grad_batches: 2\n  data:\n    batch_size: 8  # per GPU\n"
RUN_FALSE = ("from lightning.pytorch.cli import LightningCLI\n\n"
             "cli = LightningCLI(run=False)\ncli.trainer.fit(cli.model, cli.datamodule)\n")
PLAIN = ("import argparse\n\nparser = argparse.ArgumentParser()\nparser.add_argument('--config')\n"
         "print(parser.parse_args())\n")


def _plan(command: list[str], cwd: Path, **changes):
    profile = job_profile(command, cwd)
    return plan_bindings(profile.with_train(changes).for_planning(), command, cwd=cwd)


@pytest.mark.parametrize("flag", [["--config", "cfg.yaml"], ["-c", "cfg.yaml"], ["--config=cfg.yaml"]])
def test_a_run_false_script_with_only_a_config_is_read_from_it(tmp_path, flag):
    (tmp_path / "cfg.yaml").write_text(CFG)
    (tmp_path / "train.py").write_text(RUN_FALSE)
    reading = read_job(["python", "train.py", *flag], tmp_path)
    assert reading.framework == "lightning"
    assert reading.places == {"micro_batch_size": "file:cfg.yaml:data.batch_size",
                              "gradient_accumulation_steps": "file:cfg.yaml:trainer.accumulate_grad_batches",
                              "precision": "default:lightning"}
    assert reading.values["micro_batch_size"] == 8 and reading.values["gradient_accumulation_steps"] == 2


def test_a_config_before_the_subcommand_keeps_its_keys_under_the_subcommands_name(tmp_path):
    (tmp_path / "nested.yaml").write_text(NESTED)
    command = ["python", "main.py", "--config", "nested.yaml", "fit"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "lightning"
    assert reading.places["micro_batch_size"] == "file:nested.yaml:fit.data.batch_size"
    assert reading.values["micro_batch_size"] == 8
    plan = _plan(command, tmp_path, micro_batch_size=4, gradient_accumulation_steps=4)
    assert plan.argv == command
    [edit] = plan.file_edits
    assert sorted(edit.changes, key=lambda c: c["key"]) == [
        {"key": "fit.data.batch_size", "old": 8, "new": 4}, {"key": "fit.trainer.accumulate_grad_batches", "old": 2, "new": 4}]
    assert "    batch_size: 4  # per GPU\n" in edit.new_text


def test_a_flag_after_the_subcommand_beats_the_config_before_it(tmp_path):
    (tmp_path / "nested.yaml").write_text(NESTED)
    reading = read_job(["python", "main.py", "--config", "nested.yaml", "fit", "--data.batch_size", "3"], tmp_path)
    assert (reading.places["micro_batch_size"], reading.values["micro_batch_size"]) == ("argv:--data.batch_size", 3)


def test_a_lightning_shaped_config_is_evidence_when_the_script_cannot_be_read(tmp_path):
    (tmp_path / "cfg.yaml").write_text(CFG)
    reading = read_job(["python", "-m", "mypackage.train", "--config", "cfg.yaml"], tmp_path)
    assert reading.framework == "lightning"
    assert reading.values["micro_batch_size"] == 8


@pytest.mark.parametrize("config", [
    "batch_size: 32\nlr: 0.1\n",  # a plain script's own keys
    "trainer:\n  epochs: 3\nbatch_size: 8\n",  # a trainer section beside keys LightningCLI would refuse
    "model:\n  hidden: 16\ndata:\n  batch_size: 8\n",  # model/data, but nothing of jsonargparse's own
])
def test_a_plain_script_with_a_config_is_not_taken_for_lightning(tmp_path, config):
    (tmp_path / "cfg.yaml").write_text(config)
    (tmp_path / "train.py").write_text(PLAIN)
    reading = read_job(["python", "train.py", "--config", "cfg.yaml"], tmp_path)
    assert reading.framework is None
    assert reading.knobs == {}


def test_precision_is_written_as_the_installed_release_spells_it(tmp_path):
    """Lightning 2 takes ``bf16-mixed``; a job whose environment pins 1.x takes ``bf16`` (its Trainer
    refuses the 2.x words), read from the dist-info of the interpreter that runs the job."""
    import subprocess
    import sys

    from gpudoc.errors import ProfileError

    venv = tmp_path / "pl19"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "pytorch_lightning-1.9.5.dist-info").mkdir()
    (tmp_path / "cfg.yaml").write_text(CFG)
    (tmp_path / "train.py").write_text("from pytorch_lightning.cli import LightningCLI\n\nLightningCLI()\n")
    old = [str(venv / "bin" / "python"), "train.py", "fit", "--config", "cfg.yaml"]
    assert read_job(old, tmp_path).version == "1.9.5"
    assert _plan(old, tmp_path, precision="bf16").argv[-2:] == ["--trainer.precision", "bf16"]
    assert _plan(old, tmp_path, precision="fp16").argv[-2:] == ["--trainer.precision", "16"]
    with pytest.raises(ProfileError, match=r"Lightning 1\.9\.5 has no precision 'bf16-true'"):
        _plan(old, tmp_path, precision="bf16-true")
    # This environment's own release (2.x) takes the 2.x spelling.
    new = [sys.executable, "train.py", "fit", "--config", "cfg.yaml"]
    assert (read_job(new, tmp_path).version or "").startswith("2.")
    assert _plan(new, tmp_path, precision="bf16").argv[-2:] == ["--trainer.precision", "bf16-mixed"]
