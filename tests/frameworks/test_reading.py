"""Reading a job's knobs from its own command line and the real config files it names: each
framework's order of precedence, and the edit that lands where the winning value lives."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.job.knobs import read_job
from gpudoc.ladder import suggest
from gpudoc.profiles.from_job import job_profile
from tests.conftest import CONFIGS, call_beside_fifo
from tests.job.scripts import write_hf_script

HF = ["torchrun", "--nproc_per_node=2", "train.py", "--output_dir", "out", "--per_device_train_batch_size", "8",
      "--gradient_accumulation_steps", "4", "--bf16"]


def _plan(command: list[str], cwd: Path, **changes):
    """What a relaunch with ``changes`` would run and write, through the job's own profile."""
    profile = job_profile(command, cwd)
    return plan_bindings(profile.with_train(changes).for_planning(), command, cwd=cwd)


def test_hf_flags_their_places_and_the_launchers_world(tmp_path):
    write_hf_script(tmp_path)
    reading = read_job(HF, tmp_path)
    assert reading.framework == "hf-trainer"
    assert reading.values == {"micro_batch_size": 8, "gradient_accumulation_steps": 4,
                              "gradient_checkpointing": False, "precision": "bf16"}
    assert reading.places["micro_batch_size"] == "argv:--per_device_train_batch_size"
    assert reading.places["gradient_checkpointing"] == "default:hf-trainer"
    assert reading.launch == {"nproc_per_node": 2, "nnodes": 1}
    assert job_profile(HF, tmp_path).global_batch_size == 8 * 4 * 2


def test_hf_halving_edits_the_flags_in_place_and_appends_only_what_is_absent(tmp_path):
    plan = _plan(HF, tmp_path, micro_batch_size=4, gradient_accumulation_steps=8, gradient_checkpointing=True)
    assert plan.argv == ["torchrun", "--nproc_per_node=2", "train.py", "--output_dir", "out",
                         "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "8", "--bf16",
                         "--gradient_checkpointing"]
    assert plan.env == {}  # the job reads its flags, not GPUDOC_* variables
    unchanged = _plan(HF, tmp_path)
    assert unchanged.argv == HF  # nothing changed: the command is launched exactly as typed


def test_transformers5_activation_checkpointing_wins_and_is_the_flag_edited(tmp_path):
    command = ["python", "train.py", "--activation_checkpointing", "False", "--gradient_checkpointing"]
    reading = read_job(command, tmp_path)
    assert reading.values["gradient_checkpointing"] is False
    assert reading.places["gradient_checkpointing"] == "argv:--activation_checkpointing"
    plan = _plan(command, tmp_path, gradient_checkpointing=True)
    assert plan.argv[:4] == ["python", "train.py", "--activation_checkpointing", "True"]


def test_hf_flag_over_a_deepspeed_auto_keeps_the_auto(tmp_path):
    ds = tmp_path / "ds.json"
    shutil.copy(CONFIGS / "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json", ds)
    before = ds.read_text()
    command = ["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed", "ds.json",
               "--per_device_train_batch_size", "2"]
    reading = read_job(command, tmp_path)
    assert reading.values["zero_stage"] == 3 and reading.values["offload_optimizer"] is True
    assert reading.places["zero_stage"] == "file:ds.json"
    assert reading.places["micro_batch_size"] == "argv:--per_device_train_batch_size"
    assert reading.launch == {"nproc_per_node": 4, "nnodes": 1}
    plan = _plan(command, tmp_path, micro_batch_size=1, gradient_accumulation_steps=2)
    assert plan.argv[-4:] == ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "2"]
    assert plan.file_edits == []  # "auto" stays "auto": the Trainer fills it from its flags
    assert ds.read_text() == before


def test_llama_factory_yaml_on_the_command_line_is_edited_at_its_own_key(tmp_path):
    shutil.copy(CONFIGS / "LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml", tmp_path / "sft.yaml")
    ds_dir = tmp_path / "examples" / "deepspeed"
    ds_dir.mkdir(parents=True)
    shutil.copy(CONFIGS / "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json", ds_dir / "ds_z3_config.json")
    command = ["llamafactory-cli", "train", "sft.yaml"]
    reading = read_job(command, tmp_path)
    assert reading.values["micro_batch_size"] == 1 and reading.values["gradient_accumulation_steps"] == 2
    assert reading.places["micro_batch_size"] == "file:sft.yaml"
    plan = _plan(command, tmp_path, gradient_accumulation_steps=4)
    assert plan.argv == command
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "gradient_accumulation_steps", "old": 2, "new": 4}]
    assert "-gradient_accumulation_steps: 2\n+gradient_accumulation_steps: 4\n" in edit.diff


def test_axolotl_yaml_under_accelerate_launch(tmp_path):
    shutil.copy(CONFIGS / "axolotl__examples__llama-2__qlora.yml", tmp_path / "qlora.yml")
    command = ["accelerate", "launch", "--num_processes", "2", "-m", "axolotl.cli.train", "qlora.yml"]
    reading = read_job(command, tmp_path)
    assert reading.values["micro_batch_size"] == 2 and reading.values["gradient_accumulation_steps"] == 4
    assert reading.values["max_seq_len"] == 4096 and reading.values["gradient_checkpointing"] is True
    assert reading.places["micro_batch_size"] == "file:qlora.yml"
    assert reading.launch == {"nproc_per_node": 2, "nnodes": 1}
    plan = _plan(command, tmp_path, micro_batch_size=1, gradient_accumulation_steps=8)
    [edit] = plan.file_edits
    assert {c["key"]: (c["old"], c["new"]) for c in edit.changes} == {
        "micro_batch_size": (2, 1), "gradient_accumulation_steps": (4, 8)}
    assert plan.argv == command


LIGHTNING_CFG = "trainer:\n  accumulate_grad_batches: 3\n  precision: bf16-mixed\ndata:\n  batch_size: 32  # per GPU\n"


@pytest.mark.parametrize(("order", "winner", "value"), [
    (["--config", "cfg.yaml", "--data.batch_size", "16"], "argv:--data.batch_size", 16),
    (["--data.batch_size", "16", "--config", "cfg.yaml"], "file:cfg.yaml:data.batch_size", 32),
])
def test_lightning_later_source_wins_as_jsonargparse_applies_them(tmp_path, order, winner, value):
    (tmp_path / "cfg.yaml").write_text(LIGHTNING_CFG)
    command = ["python", "main.py", "fit", *order]
    reading = read_job(command, tmp_path)
    assert reading.framework == "lightning"
    assert (reading.places["micro_batch_size"], reading.values["micro_batch_size"]) == (winner, value)
    assert reading.values["gradient_accumulation_steps"] == 3
    assert reading.values["precision"] == "bf16"


def test_lightning_knob_in_the_config_is_edited_in_the_config_not_shadowed_by_a_flag(tmp_path):
    (tmp_path / "cfg.yaml").write_text(LIGHTNING_CFG)
    command = ["python", "main.py", "fit", "--config", "cfg.yaml"]
    plan = _plan(command, tmp_path, micro_batch_size=16, gradient_accumulation_steps=6)
    assert plan.argv == command
    [edit] = plan.file_edits
    assert "  batch_size: 16  # per GPU\n" in edit.new_text  # the comment survives
    assert "  accumulate_grad_batches: 6\n" in edit.new_text


def _hydra_project(root: Path) -> None:
    (root / "conf" / "data_loader").mkdir(parents=True)
    (root / "conf" / "config.yaml").write_text(
        "defaults:\n  - data_loader: default\n  - _self_\ntrainer:\n  accumulate_grad_batches: 5\n")
    (root / "conf" / "data_loader" / "default.yaml").write_text("batch_size: 45\nnum_workers: 4\n")
    (root / "train.py").write_text(
        "import hydra\n\n@hydra.main(config_path=\"conf\", config_name=\"config\", version_base=None)\n"
        "def main(cfg):\n    print(cfg)\n\nif __name__ == \"__main__\":\n    main()\n")


def test_hydra_reads_the_decorators_config_and_its_defaults_group(tmp_path):
    _hydra_project(tmp_path)
    reading = read_job(["python", "train.py"], tmp_path)
    assert reading.framework == "hydra"
    assert reading.places == {"micro_batch_size": "file:conf/data_loader/default.yaml:batch_size",
                              "gradient_accumulation_steps": "file:conf/config.yaml:trainer.accumulate_grad_batches"}
    plan = _plan(["python", "train.py"], tmp_path, micro_batch_size=15, gradient_accumulation_steps=15)
    assert {e.path.name: e.changes for e in plan.file_edits} == {
        "default.yaml": [{"key": "batch_size", "old": 45, "new": 15}],
        "config.yaml": [{"key": "trainer.accumulate_grad_batches", "old": 5, "new": 15}]}


def test_a_hydra_leaf_that_only_looks_like_a_knob_and_holds_no_count_is_passed_over(tmp_path):
    # A key gpudoc finds by its name alone: -1 ("all") is some other setting, not a batch to refuse.
    _hydra_project(tmp_path)
    (tmp_path / "conf" / "data_loader" / "default.yaml").write_text("batch_size: -1\nnum_workers: 4\n")
    reading = read_job(["python", "train.py"], tmp_path)
    assert reading.framework == "hydra" and "micro_batch_size" not in reading.places
    assert reading.places["gradient_accumulation_steps"] == "file:conf/config.yaml:trainer.accumulate_grad_batches"


def test_an_empty_hydra_config_or_group_option_sets_nothing_and_is_no_note(tmp_path):
    # Hydra composes an empty file as {}: a group option such as none.yaml is common and fine.
    _hydra_project(tmp_path)
    (tmp_path / "conf" / "config.yaml").write_text("defaults:\n  - data_loader: none\n  - _self_\n")
    (tmp_path / "conf" / "data_loader" / "none.yaml").write_text("")
    # `+`: the key is in no file Hydra composes (without it Hydra refuses the override, and so would the job)
    reading = read_job(["python", "train.py", "+data_loader.batch_size=4"], tmp_path)
    assert reading.framework == "hydra" and reading.notes == []
    assert reading.places == {"micro_batch_size": "argv:data_loader.batch_size"}
    (tmp_path / "conf" / "config.yaml").write_text("")
    assert read_job(["python", "train.py"], tmp_path).notes == []


def test_hydra_override_beats_the_file_and_is_the_one_edited(tmp_path):
    _hydra_project(tmp_path)
    command = ["python", "train.py", "data_loader.batch_size=45", "++trainer.accumulate_grad_batches=5"]
    reading = read_job(command, tmp_path)
    assert reading.places["micro_batch_size"] == "argv:data_loader.batch_size"
    assert reading.places["gradient_accumulation_steps"] == "argv:trainer.accumulate_grad_batches"
    plan = _plan(command, tmp_path, micro_batch_size=15, gradient_accumulation_steps=15)
    assert plan.argv == ["python", "train.py", "data_loader.batch_size=15", "++trainer.accumulate_grad_batches=15"]
    assert plan.file_edits == []  # the file's 45 is not what the job runs with: left alone


def test_hydra_config_named_on_the_command_line(tmp_path):
    _hydra_project(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "big.yaml").write_text("train:\n  micro_batch_size: 4\n  max_seq_len: 4096\n")
    reading = read_job(["python", "train.py", "--config-path", "other", "--config-name", "big"], tmp_path)
    assert reading.values == {"micro_batch_size": 4, "max_seq_len": 4096}
    assert reading.places["max_seq_len"] == "file:other/big.yaml:train.max_seq_len"


def test_torchtune_override_beats_its_real_config(tmp_path):
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", tmp_path / "tt.yaml")
    command = ["tune", "run", "--nproc_per_node", "2", "lora_finetune_distributed", "--config", "tt.yaml",
               "batch_size=8"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "torchtune"
    assert reading.values["micro_batch_size"] == 8 and reading.places["micro_batch_size"] == "argv:batch_size"
    assert reading.values["gradient_accumulation_steps"] == 8
    assert reading.places["gradient_accumulation_steps"] == "file:tt.yaml:gradient_accumulation_steps"
    assert reading.values["gradient_checkpointing"] is True and reading.values["precision"] == "bf16"
    assert reading.launch["nproc_per_node"] == 2
    plan = _plan(command, tmp_path, micro_batch_size=4, gradient_accumulation_steps=16)
    assert plan.argv[-1] == "batch_size=4"
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "gradient_accumulation_steps", "old": 8, "new": 16}]


def test_torchtune_override_is_not_said_to_lose_to_the_config_it_beats(tmp_path):
    # The real config hard-codes batch_size: 2; the command's batch_size=8 wins, and so does 4 after it.
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", tmp_path / "tt.yaml")
    command = ["tune", "run", "lora_finetune_single_device", "--config", "tt.yaml", "batch_size=8"]
    plan = _plan(command, tmp_path, micro_batch_size=4, gradient_accumulation_steps=16)
    assert plan.argv[-1] == "batch_size=4"
    assert plan.conflicts == []


def test_nanogpt_config_file_then_flags_with_accumulation_per_rank(tmp_path):
    shutil.copy(CONFIGS / "nanoGPT__config__train_gpt2.py", tmp_path / "train_gpt2.py")
    command = ["torchrun", "--standalone", "--nproc_per_node=8", "train.py", "train_gpt2.py", "--batch_size=6"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "nanogpt"
    # train_gpt2.py: batch_size = 12, gradient_accumulation_steps = 5 * 8 (the total over 8 ranks)
    assert reading.values["micro_batch_size"] == 6 and reading.places["micro_batch_size"] == "argv:--batch_size"
    assert reading.values["gradient_accumulation_steps"] == 5
    assert reading.places["max_seq_len"] == "file:train_gpt2.py:block_size"


def test_a_script_with_no_known_flags_has_no_knobs(tmp_path):
    reading = read_job(["python", "-c", "print(1)"], tmp_path)
    assert reading.framework is None and reading.knobs == {}
    assert job_profile(["python", "-c", "print(1)"], tmp_path).for_planning().train == {}


def test_an_unreadable_config_is_a_note_not_a_crash(tmp_path):
    (tmp_path / "cfg.yaml").write_text("data: [unclosed\n")
    reading = read_job(["python", "main.py", "fit", "--config", "cfg.yaml", "--data.batch_size", "4"], tmp_path)
    assert reading.values["micro_batch_size"] == 4
    assert any(note.startswith("cfg.yaml: not read") for note in reading.notes)


def test_the_record_keeps_each_knobs_place(tmp_path):
    doc = job_profile(HF, tmp_path).to_dict()
    assert doc["source"] == "command" and doc["framework"] == "hf-trainer"
    assert doc["knobs"]["micro_batch_size"] == {"value": 8, "where": "argv:--per_device_train_batch_size"}
    json.dumps(doc)  # a run record holds it as JSON


@pytest.mark.parametrize(("component", "loss"), [("torch.nn.CrossEntropyLoss", "fp32_logits"),
                                                 ("torchtune.modules.loss.CEWithChunkedOutputLoss", "chunked")])
def test_torchtunes_loss_component_is_the_estimates_loss(tmp_path, component, loss):
    """torchtune's 2024 configs named torch's CrossEntropyLoss, which gets the fp32 logits its model
    returns; later ones a chunked loss (this real config: LinearCrossEntropyLoss)."""
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", tmp_path / "tt.yaml")
    command = ["tune", "run", "lora_finetune_single_device", "--config", "tt.yaml"]
    reading = read_job(command, tmp_path)
    assert reading.values["loss"] == "chunked" and reading.places["loss"] == "file:tt.yaml:loss._component_"
    reading = read_job([*command, f"loss._component_={component}"], tmp_path)
    assert reading.values["loss"] == loss and reading.places["loss"] == "argv:loss._component_"
    reading = read_job([*command, "loss._component_=my.own.Loss"], tmp_path)
    assert "loss" not in reading.values
    assert any("loss my.own.Loss is not one gpudoc knows" in note for note in reading.notes)


def test_torchtune_optimizer_in_bwd_keeps_accumulation_at_one(tmp_path):
    # The real 3B single-device config: optimizer_in_bwd: True, gradient_accumulation_steps: 1, batch_size: 4.
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_2__3B_full_single_device.yaml", tmp_path / "cfg.yaml")
    command = ["tune", "run", "full_finetune_single_device", "--config", "cfg.yaml"]
    reading = read_job(command, tmp_path)
    assert reading.values == {"micro_batch_size": 4, "gradient_checkpointing": True, "precision": "bf16",
                              "loss": "chunked"}
    assert any("optimizer_in_bwd" in note and "gradient_accumulation_steps" in note for note in reading.notes)
    # torchtune raises "Gradient accumulation is not supported with optimizer in bwd": no rung raises it.
    ladder = suggest(Diagnosis(cause="gpu_oom", summary="oom"), job_profile(command, tmp_path),
                     estimate=lambda *a, **k: None)
    assert ladder.suggestions
    assert not [s for s in ladder.suggestions + ladder.semantic_held_back if "gradient_accumulation_steps" in s.changes]
    [halve] = [s for s in ladder.suggestions if s.rung == "halve-micro-batch"]
    assert halve.changes == {"micro_batch_size": [4, 2]}
    plan = _plan(command, tmp_path, **{k: v[1] for k, v in halve.changes.items()})
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "batch_size", "old": 4, "new": 2}]
    # Turned off on the command line, accumulation is a knob again.
    off = read_job([*command, "optimizer_in_bwd=False"], tmp_path)
    assert off.values["gradient_accumulation_steps"] == 1


def test_a_script_that_is_a_pipe_is_not_read(tmp_path):
    """`gpudoc run -- python <(...)`: the script is a pipe; parsing it for @hydra.main or LightningCLI
    would wait for a writer, or take the bytes python itself should read."""
    os.mkfifo(tmp_path / "train.py")
    for command in (["python", "train.py"], ["python", "train.py", "--config", "cfg.yaml"]):
        reading = call_beside_fifo(tmp_path / "train.py", lambda c=command: read_job(c, tmp_path))
        assert reading.knobs == {}


def test_a_trl_job_takes_no_default_trl_overrides_from_the_trainer(tmp_path):
    """TRL's configs turn gradient checkpointing and bf16 on in later releases: for a job that
    builds them, those knobs are unknown until a flag says, never the Trainer's false/fp32. (Where
    TRL is importable its config is asked instead: tests/frameworks/test_hf_asked.py.)"""
    from tests.job.scripts import TRL_SFT

    (tmp_path / "sft.py").write_text(TRL_SFT)
    python = tmp_path / "python"  # an interpreter where TRL is not importable (no site-packages)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    command = [str(python), "sft.py", "--model_name_or_path", "Qwen/Qwen2-0.5B", "--per_device_train_batch_size", "2",
               "--output_dir", "out"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "hf-trainer"
    assert reading.values == {"micro_batch_size": 2, "gradient_accumulation_steps": 1}
    assert any("builds TRL's trainer or config" in note and "gradient_checkpointing and precision stay unknown" in note
               for note in reading.notes)
    # A flag settles it; nothing is left to say.
    reading = read_job([*command, "--bf16", "--gradient_checkpointing", "false"], tmp_path)
    assert reading.values["precision"] == "bf16" and reading.values["gradient_checkpointing"] is False
    assert not any("TRL" in note for note in reading.notes)
