"""Argument presets: replace in place (both flag forms), append when absent, never duplicate,
never touch the launcher's own options."""

from __future__ import annotations

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.errors import ProfileError
from gpudoc.profiles.model import Profile


def plan(preset, knobs, argv, tmp_path, launch=None, **bind):
    profile = Profile(name="t", train=knobs, launch=launch or {}, bind={"args": preset, **bind})
    return plan_bindings(profile, argv, cwd=tmp_path)


def test_hf_replaces_both_flag_forms_in_place_and_appends_missing(tmp_path):
    argv = ["python", "train.py", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps=1",
            "--output_dir", "out"]
    p = plan("hf-trainer", {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "gradient_checkpointing": True},
             argv, tmp_path)
    assert p.argv == ["python", "train.py", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps=4",
                      "--output_dir", "out", "--gradient_checkpointing"]


def test_hf_never_duplicates_flags_already_written(tmp_path):
    argv = ["python", "t.py", "--gradient_checkpointing", "--bf16", "--per_device_train_batch_size", "2"]
    p = plan("hf-trainer", {"micro_batch_size": 2, "gradient_checkpointing": True, "precision": "bf16"}, argv, tmp_path)
    assert p.argv == argv
    for flag in ("--gradient_checkpointing", "--bf16", "--per_device_train_batch_size"):
        assert p.argv.count(flag) == 1


@pytest.mark.parametrize("given,on,expected", [
    (["--gradient_checkpointing"], False, []),
    (["--gradient_checkpointing", "True"], False, ["--gradient_checkpointing", "False"]),
    (["--gradient_checkpointing=True"], False, ["--gradient_checkpointing=False"]),
    (["--gradient_checkpointing", "False"], True, ["--gradient_checkpointing", "True"]),
    (["--gradient_checkpointing", "false"], True, ["--gradient_checkpointing", "true"]),
    (["--gradient_checkpointing=False"], True, ["--gradient_checkpointing=True"]),
    ([], False, []),
])
def test_hf_gradient_checkpointing_forms(tmp_path, given, on, expected):
    p = plan("hf-trainer", {"gradient_checkpointing": on}, ["python", "t.py", *given, "--seed", "1"], tmp_path)
    assert p.argv == ["python", "t.py", *expected, "--seed", "1"]


@pytest.mark.parametrize("given,precision,expected", [
    (["--fp16"], "bf16", ["--bf16"]),
    (["--fp16", "True"], "bf16", ["--bf16", "True"]),
    (["--bf16", "True", "--tf32", "True"], "fp16", ["--tf32", "True", "--fp16", "True"]),
    (["--bf16=True"], "fp32", []),
    (["--bf16"], "bf16", ["--bf16"]),
])
def test_hf_switching_precision_removes_the_other_flag(tmp_path, given, precision, expected):
    p = plan("hf-trainer", {"precision": precision}, ["python", "t.py", *given], tmp_path)
    assert p.argv == ["python", "t.py", *expected]


def test_hf_bf16_true_cannot_be_expressed(tmp_path):
    with pytest.raises(ProfileError, match=r"precision = bf16-true.*hf-trainer"):
        plan("hf-trainer", {"precision": "bf16-true"}, ["python", "t.py"], tmp_path)


def test_hf_max_seq_len_replaces_the_flag_the_script_reads(tmp_path):
    p = plan("hf-trainer", {"max_seq_len": 1024}, ["python", "t.py", "--model_max_length", "2048"], tmp_path)
    assert p.argv == ["python", "t.py", "--model_max_length", "1024"]
    p = plan("hf-trainer", {"max_seq_len": 512}, ["python", "t.py", "--max_seq_length=2048"], tmp_path)
    assert p.argv == ["python", "t.py", "--max_seq_length=512"]


def test_hf_max_seq_len_without_a_flag_is_an_error_naming_preset_and_knob(tmp_path):
    with pytest.raises(ProfileError) as err:
        plan("hf-trainer", {"max_seq_len": 1024}, ["python", "t.py"], tmp_path)
    assert "max_seq_len = 1024" in str(err.value) and "hf-trainer" in str(err.value)
    assert "--model_max_length" in str(err.value)


def test_a_placeholder_counts_as_binding_a_knob(tmp_path):
    p = plan("hf-trainer", {"max_seq_len": 1024}, ["python", "t.py", "--max_len", "{max_seq_len}"], tmp_path)
    assert p.argv == ["python", "t.py", "--max_len", "1024"]


def test_hf_zero_stage_without_deepspeed_is_an_error(tmp_path):
    with pytest.raises(ProfileError, match="zero_stage = 2.*--deepspeed"):
        plan("hf-trainer", {"zero_stage": 2}, ["python", "t.py"], tmp_path)
    # zero_stage = 0 needs nothing
    assert plan("hf-trainer", {"zero_stage": 0}, ["python", "t.py"], tmp_path).argv == ["python", "t.py"]


@pytest.mark.parametrize("tail", [["--deepspeed"], ["--deepspeed", "--bf16"]])
def test_hf_zero_stage_with_a_bare_deepspeed_switch_says_it_names_no_file(tmp_path, tail):
    # The command gives --deepspeed (it is not said to lack one), but no JSON follows it: there is no
    # file to carry the stage, and none is followed.
    with pytest.raises(ProfileError) as err:
        plan("hf-trainer", {"zero_stage": 2}, ["python", "t.py", *tail], tmp_path)
    said = str(err.value)
    assert "zero_stage = 2 (hf-trainer: zero_stage reaches the Trainer only through the DeepSpeed JSON" in said
    assert "the command's --deepspeed names no file (the Trainer's parser refuses it too)" in said
    assert "has no --deepspeed" not in said
    quiet = plan("hf-trainer", {"zero_stage": 0}, ["python", "t.py", *tail], tmp_path)  # stage 0 needs no file
    assert quiet.argv == ["python", "t.py", *tail] and quiet.file_edits == []


def test_custom_knobs_reach_the_job_only_through_env(tmp_path):
    p = plan("hf-trainer", {"micro_batch_size": 2, "n_negatives": 8}, ["python", "t.py"], tmp_path)
    assert p.env["GPUDOC_N_NEGATIVES"] == "8"
    assert "8" not in p.argv


def test_launcher_options_are_never_touched(tmp_path):
    argv = ["torchrun", "--nproc_per_node", "2", "--nnodes=1", "--standalone", "--max-restarts", "0",
            "train.py", "--per_device_train_batch_size", "16"]
    p = plan("hf-trainer", {"micro_batch_size": 4, "gradient_accumulation_steps": 2}, argv, tmp_path,
             launch={"nproc_per_node": 2})
    assert p.argv[:8] == argv[:8]
    assert p.argv[8:] == ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"]
    assert p.conflicts == []


def test_accelerate_launch_own_gradient_accumulation_is_not_the_scripts(tmp_path):
    argv = ["accelerate", "launch", "--num_processes", "2", "--gradient_accumulation_steps", "8", "--multi_gpu",
            "train.py", "--lr", "1e-4"]
    p = plan("accelerate", {"gradient_accumulation_steps": 4}, argv, tmp_path, launch={"nproc_per_node": 2})
    assert p.argv == [*argv, "--gradient_accumulation_steps", "4"]


def test_deepspeed_launcher_and_python_m_torch_distributed(tmp_path):
    p = plan("hf-trainer", {"micro_batch_size": 3}, ["deepspeed", "--num_gpus", "2", "t.py", "--x"], tmp_path)
    assert p.argv == ["deepspeed", "--num_gpus", "2", "t.py", "--x", "--per_device_train_batch_size", "3"]
    p = plan("hf-trainer", {"micro_batch_size": 3},
             ["python", "-m", "torch.distributed.run", "--nproc_per_node=1", "t.py"], tmp_path)
    assert p.argv[-2:] == ["--per_device_train_batch_size", "3"] and p.argv[3] == "--nproc_per_node=1"


def test_lightning_cli(tmp_path):
    argv = ["python", "main.py", "fit", "--trainer.precision=32-true", "--data.batch_size", "64"]
    p = plan("lightning", {"micro_batch_size": 8, "gradient_accumulation_steps": 4, "precision": "bf16",
                           "zero_stage": 2, "offload_optimizer": True}, argv, tmp_path)
    assert p.argv == ["python", "main.py", "fit", "--trainer.precision=bf16-mixed", "--data.batch_size", "8",
                      "--trainer.accumulate_grad_batches", "4", "--trainer.strategy", "deepspeed_stage_2_offload"]


def test_lightning_gradient_checkpointing_needs_a_model_flag(tmp_path):
    with pytest.raises(ProfileError, match="lightning"):
        plan("lightning", {"gradient_checkpointing": True}, ["python", "main.py", "fit"], tmp_path)
    p = plan("lightning", {"gradient_checkpointing": True},
             ["python", "main.py", "fit", "--model.gradient_checkpointing", "false"], tmp_path)
    assert p.argv[-2:] == ["--model.gradient_checkpointing", "true"]


def test_torchtune_key_value_overrides(tmp_path):
    argv = ["tune", "run", "--nproc_per_node", "4", "full_finetune_distributed", "--config", "llama3_1/8B_full",
            "batch_size=8", "dtype=fp32"]
    p = plan("torchtune", {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "precision": "bf16",
                           "gradient_checkpointing": True, "max_seq_len": 2048}, argv, tmp_path,
             launch={"nproc_per_node": 4})
    assert p.argv == ["tune", "run", "--nproc_per_node", "4", "full_finetune_distributed", "--config",
                      "llama3_1/8B_full", "batch_size=2", "dtype=bf16", "gradient_accumulation_steps=4",
                      "tokenizer.max_seq_len=2048", "enable_activation_checkpointing=True"]
    assert any("pure bf16" in n for n in p.notes)


def test_torchtune_rejects_zero_and_fp16(tmp_path):
    with pytest.raises(ProfileError, match="torchtune.*FSDP"):
        plan("torchtune", {"zero_stage": 2}, ["tune", "run", "r", "--config", "c"], tmp_path)
    with pytest.raises(ProfileError, match="dtype takes bf16 or fp32"):
        plan("torchtune", {"precision": "fp16"}, ["tune", "run", "r", "--config", "c"], tmp_path)


def test_nanogpt_uses_eq_form_and_scales_accumulation_by_world_size(tmp_path):
    argv = ["torchrun", "--standalone", "--nproc_per_node=8", "train.py", "config/train_gpt2.py", "--batch_size=12"]
    p = plan("nanogpt", {"micro_batch_size": 6, "gradient_accumulation_steps": 10, "max_seq_len": 512,
                         "precision": "fp16"}, argv, tmp_path, launch={"nproc_per_node": 8})
    assert p.argv == ["torchrun", "--standalone", "--nproc_per_node=8", "train.py", "config/train_gpt2.py",
                      "--batch_size=6", "--gradient_accumulation_steps=80", "--block_size=512", "--dtype=float16"]
    assert any("80" in n for n in p.notes)


def test_nanogpt_cannot_checkpoint(tmp_path):
    with pytest.raises(ProfileError, match="nanogpt: train.py has no setting for gradient_checkpointing"):
        plan("nanogpt", {"gradient_checkpointing": True}, ["python", "train.py"], tmp_path)


def test_unknown_preset_is_a_profile_error(tmp_path):
    with pytest.raises(ProfileError, match="unknown preset"):
        plan("fairseq", {}, ["python", "t.py"], tmp_path)


def test_hf_deepspeed_json_is_edited_through_the_file_preset_leaving_auto(tmp_path):
    (tmp_path / "ds.json").write_text('{\n  "train_micro_batch_size_per_gpu": "auto",\n'
                                      '  "zero_optimization": {"stage": 2}\n}\n')
    p = plan("hf-trainer", {"micro_batch_size": 2, "zero_stage": 3},
             ["python", "t.py", "--deepspeed=ds.json"], tmp_path)
    assert p.argv == ["python", "t.py", "--deepspeed=ds.json", "--per_device_train_batch_size", "2"]
    (edit,) = p.file_edits
    assert edit.new_text == '{\n  "train_micro_batch_size_per_gpu": "auto",\n  "zero_optimization": {"stage": 3}\n}\n'
    assert any('left train_micro_batch_size_per_gpu = "auto"' in n for n in p.notes)
