"""Finding a job's newest complete checkpoint, per framework, and the switch that resumes from it.
The Lightning and torchtune files are written by the real ``torch.save`` (a zip archive)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import torch

from gpudoc.job.checkpoints import newest_checkpoint, resume_command
from tests.conftest import CONFIGS


def _hf_checkpoint(out: Path, step: int, *, state: bool = True, weights: bool = True) -> Path:
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if weights:
        (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def test_hf_newest_complete_checkpoint_by_step(tmp_path):
    out = tmp_path / "out"
    for step in (2, 10):
        _hf_checkpoint(out, step)
    _hf_checkpoint(out, 30, state=False)  # the save was killed before the trainer state
    _hf_checkpoint(out, 40, weights=False)  # ... or before the weights
    (_hf_checkpoint(out, 50) / "trainer_state.json").write_text('{"global_st')  # ... or mid-state
    found = newest_checkpoint("hf-trainer", ["python", "train.py", "--output_dir=out"], tmp_path)
    assert found is not None and (found.path, found.step) == ("out/checkpoint-10", 10)
    assert found.switch() == ("--resume_from_checkpoint", "out/checkpoint-10")


def test_a_checkpoint_older_than_the_chain_is_someone_elses(tmp_path):
    old = _hf_checkpoint(tmp_path / "out", 100)
    then = time.time() - 3600
    os.utime(old / "trainer_state.json", (then, then))
    command = ["python", "train.py", "--output_dir", "out"]
    assert newest_checkpoint("hf-trainer", command, tmp_path, since=time.time() - 60) is None
    assert newest_checkpoint("hf-trainer", command, tmp_path, since=then - 60) is not None


def test_hf_output_dir_from_the_config_file_given_first(tmp_path):
    (tmp_path / "sft.yaml").write_text("model_name_or_path: x\noutput_dir: saves/run1\n")
    _hf_checkpoint(tmp_path / "saves" / "run1", 5)
    for command in (["llamafactory-cli", "train", "sft.yaml"], ["python", "train.py", "sft.yaml"]):
        found = newest_checkpoint("hf-trainer", command, tmp_path)
        assert found is not None and found.path == "saves/run1/checkpoint-5", command


def test_lightning_whole_ckpt_files_under_the_logger_or_a_model_checkpoint_dirpath(tmp_path):
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save({"global_step": 3}, folder / "epoch=0-step=3.ckpt")
    data = (folder / "epoch=0-step=3.ckpt").read_bytes()
    cut = folder / "epoch=0-step=6.ckpt"
    cut.write_bytes(data[: len(data) // 2])  # a save cut short: no zip end record
    command = ["python", "cli.py", "fit", "--config", "cfg.yaml"]
    (tmp_path / "cfg.yaml").write_text("trainer:\n  max_steps: 10\n")
    found = newest_checkpoint("lightning", command, tmp_path)
    assert found is not None and (found.path, found.step) == ("lightning_logs/version_0/checkpoints/epoch=0-step=3.ckpt", 3)
    assert resume_command(command, found.switch())[-2:] == ["--ckpt_path", found.path]

    (tmp_path / "cfg.yaml").write_text("trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
                                       "      init_args:\n        dirpath: ckpts\n")
    (tmp_path / "ckpts").mkdir()
    time.sleep(0.01)
    torch.save({"global_step": 9}, tmp_path / "ckpts" / "last.ckpt")
    found = newest_checkpoint("lightning", command, tmp_path)
    assert found is not None and (found.path, found.step) == ("ckpts/last.ckpt", None)


def test_torchtune_recipe_state_in_its_output_dir(tmp_path):
    out = tmp_path / "tt"
    (out / "recipe_state").mkdir(parents=True)
    (out / "epoch_0").mkdir()
    (out / "epoch_1").mkdir()
    # torchtune's own config (its output_dir under /tmp); the override on the command line wins.
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", tmp_path / "cfg.yaml")
    command = ["tune", "run", "lora_finetune_single_device", "--config", "cfg.yaml", "output_dir=tt"]
    assert newest_checkpoint("torchtune", command, tmp_path) is None
    torch.save({"epochs_run": 2}, out / "recipe_state" / "recipe_state.pt")
    found = newest_checkpoint("torchtune", command, tmp_path)
    assert found is not None and (found.path, found.step, found.unit) == ("tt/recipe_state/recipe_state.pt", 1, "epoch")
    assert resume_command([*command, "resume_from_checkpoint=False"], found.switch()) == [
        *command, "resume_from_checkpoint=True"]


def test_resume_switch_replaces_a_value_already_there():
    command = ["python", "t.py", "--resume_from_checkpoint", "old", "--bf16"]
    assert resume_command(command, ("--resume_from_checkpoint", "out/checkpoint-4")) == [
        "python", "t.py", "--resume_from_checkpoint", "out/checkpoint-4", "--bf16"]
    assert resume_command(["python", "t.py", "--ckpt_path=a"], ("--ckpt_path", "b")) == ["python", "t.py", "--ckpt_path=b"]


def test_an_unknown_framework_has_no_checkpoint(tmp_path):
    _hf_checkpoint(tmp_path / "out", 1)
    assert newest_checkpoint("hydra", ["python", "t.py", "--output_dir", "out"], tmp_path) is None
