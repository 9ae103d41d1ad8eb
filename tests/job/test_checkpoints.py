"""Finding a job's newest complete checkpoint, per framework, and the switch that resumes from it.
The Lightning and torchtune files are written by the real ``torch.save`` (a zip archive)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from gpudoc.job.checkpoints import newest_checkpoint, resume_command, written_checkpoints
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


# -- what resuming would read, held to the trust rule (SPEC "Trust") ------------------------------

NOBODY = 65534
HF = ["python", "train.py", "--output_dir", "out"]


def test_every_complete_checkpoint_is_listed_newest_first_with_what_resuming_reads(tmp_path):
    for step in (2, 10, 6):
        _hf_checkpoint(tmp_path / "out", step)
    found = written_checkpoints("hf-trainer", HF, tmp_path)
    assert [c.step for c in found] == [10, 6, 2]
    assert found[0].holds == (tmp_path / "out" / "checkpoint-10",) and found[0].within == tmp_path / "out"
    assert all(c.problem() is None for c in found)


def test_a_rewritten_save_has_another_stamp(tmp_path):
    state = _hf_checkpoint(tmp_path / "out", 4) / "trainer_state.json"
    before = newest_checkpoint("hf-trainer", HF, tmp_path).stamp()
    assert before["path"] == "out/checkpoint-4" and before == newest_checkpoint("hf-trainer", HF, tmp_path).stamp()
    state.unlink()
    state.write_text(json.dumps({"global_step": 4}))
    assert newest_checkpoint("hf-trainer", HF, tmp_path).stamp() != before


def test_links_out_of_the_output_folder_are_a_problem_links_within_it_are_not(tmp_path):
    outside = _hf_checkpoint(tmp_path / "theirs", 50)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "checkpoint-50").symlink_to(outside)
    problem = newest_checkpoint("hf-trainer", HF, tmp_path).problem()
    assert problem is not None and f"leads out of the output folder {tmp_path / 'out'}, to {outside}" in str(problem)
    # One file of a real checkpoint linked out (the weights, say) is the same hole.
    (tmp_path / "out" / "checkpoint-50").unlink()
    inside = _hf_checkpoint(tmp_path / "out", 60)
    (inside / "model.safetensors").unlink()
    (inside / "model.safetensors").symlink_to(outside / "model.safetensors")
    assert "leads out of the output folder" in str(newest_checkpoint("hf-trainer", HF, tmp_path).problem())
    # Lightning's last.ckpt may be a link to a checkpoint beside it: that one stays inside.
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save({"global_step": 3}, folder / "epoch=0-step=3.ckpt")
    (folder / "last.ckpt").symlink_to(folder / "epoch=0-step=3.ckpt")
    found = written_checkpoints("lightning", ["python", "cli.py", "fit"], tmp_path)
    assert len(found) == 2 and all(c.problem() is None for c in found)


def test_a_logger_folder_linked_elsewhere_leads_out_too(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "checkpoints"
    elsewhere.mkdir(parents=True)
    torch.save({"global_step": 3}, elsewhere / "epoch=0-step=3.ckpt")
    (tmp_path / "job" / "lightning_logs").mkdir(parents=True)
    (tmp_path / "job" / "lightning_logs" / "version_0").symlink_to(tmp_path / "elsewhere")
    found = newest_checkpoint("lightning", ["python", "cli.py", "fit"], tmp_path / "job")
    assert found is not None and "leads out of the output folder" in str(found.problem())


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")
def test_a_checkpoint_or_a_torchtune_epoch_another_user_wrote_names_its_owner(tmp_path):
    planted = _hf_checkpoint(tmp_path / "out", 99)
    os.chown(planted / "model.safetensors", NOBODY, NOBODY)
    problem = newest_checkpoint("hf-trainer", HF, tmp_path).problem()
    assert problem is not None and str(problem).startswith(f"{planted / 'model.safetensors'} belongs to nobody")
    out = tmp_path / "tt"
    (out / "recipe_state").mkdir(parents=True)
    (out / "epoch_0").mkdir()
    torch.save({"epochs_run": 1}, out / "recipe_state" / "recipe_state.pt")
    command = ["tune", "run", "full_finetune_single_device", "output_dir=tt"]
    assert newest_checkpoint("torchtune", command, tmp_path).problem() is None
    (out / "epoch_0" / "model-00001-of-00001.bin").write_bytes(b"\0")
    os.chown(out / "epoch_0" / "model-00001-of-00001.bin", NOBODY, NOBODY)
    assert "belongs to nobody" in str(newest_checkpoint("torchtune", command, tmp_path).problem())
