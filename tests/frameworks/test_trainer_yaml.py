"""Jobs whose knobs live in a config file a gpudoc file preset knows: a native DeepSpeed JSON, axolotl's
and LLaMA-Factory's YAML (and the DeepSpeed JSON they name), accelerate's config. Each is read from the
real file and each change lands in it, never as a flag the framework does not take."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.job.knobs import read_job
from gpudoc.ladder import suggest
from gpudoc.profiles.from_job import job_profile
from tests.conftest import CONFIGS
from tests.job.scripts import write_hf_script

DS_ZERO3 = CONFIGS / "DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json"
AXOLOTL_FFT = CONFIGS / "axolotl__examples__llama-3__fft-8b.yaml"
LF_FULL = CONFIGS / "LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml"
LF_DS3 = CONFIGS / "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json"
TRL_ZERO3 = CONFIGS / "trl__examples__accelerate_configs__deepspeed_zero3.yaml"


def _plan(command: list[str], cwd: Path, **changes):
    profile = job_profile(command, cwd)
    return plan_bindings(profile.with_train(changes).for_planning(), command, cwd=cwd)


def _ladder(command: list[str], cwd: Path):
    return suggest(Diagnosis(cause="gpu_oom", summary="oom"), job_profile(command, cwd),
                   estimate=lambda *a, **k: None)


@pytest.mark.parametrize("command", [
    ["deepspeed", "--num_gpus", "1", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"],
    ["deepspeed", "train.py", "--deepspeed_config", "ds.json"],
    ["deepspeed", "train.py", "--deepspeed_config=ds.json"],
])
def test_native_deepspeed_reads_its_json_and_halving_edits_it(tmp_path, command):
    shutil.copy(DS_ZERO3, tmp_path / "ds.json")
    reading = read_job(command, tmp_path)
    assert reading.framework == "deepspeed"
    # train_micro_batch_size_per_gpu 8, gradient_accumulation_steps 1, fp16.enabled, zero_optimization.stage 3,
    # and no offload section: DeepSpeed's default, no offload (so the offload rungs apply)
    assert reading.values == {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "precision": "fp16",
                              "zero_stage": 3, "offload_optimizer": False, "offload_params": False}
    assert set(reading.places.values()) == {"file:ds.json"}
    plan = _plan(command, tmp_path, micro_batch_size=4, gradient_accumulation_steps=2)
    assert plan.argv == command  # no HF Trainer flags appended
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "train_micro_batch_size_per_gpu", "old": 8, "new": 4},
                            {"key": "gradient_accumulation_steps", "old": 1, "new": 2}]


@pytest.mark.parametrize("command", [
    ["axolotl", "train", "cfg.yml"],
    ["accelerate", "launch", "-m", "axolotl.cli.train", "cfg.yml"],
    ["python", "-m", "axolotl.cli.train", "cfg.yml"],
])
def test_axolotl_bf16_auto_is_no_precision_to_change(tmp_path, command):
    shutil.copy(AXOLOTL_FFT, tmp_path / "cfg.yml")
    reading = read_job(command, tmp_path)
    assert reading.framework == "axolotl"
    assert reading.values == {"micro_batch_size": 1, "gradient_accumulation_steps": 8, "gradient_checkpointing": True,
                              "max_seq_len": 8192}
    assert any("bf16: auto" in note for note in reading.notes)
    ladder = _ladder(command, tmp_path)
    assert not [s for s in ladder.suggestions + ladder.semantic_held_back if "precision" in s.changes]
    plan = _plan(command, tmp_path, gradient_accumulation_steps=16)
    assert plan.argv == command
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "gradient_accumulation_steps", "old": 8, "new": 16}]


def test_axolotl_knob_at_its_default_is_written_into_the_yaml(tmp_path):
    text = AXOLOTL_FFT.read_text().replace("gradient_checkpointing: true\n", "")
    (tmp_path / "cfg.yml").write_text(text)
    reading = read_job(["axolotl", "train", "cfg.yml"], tmp_path)
    assert reading.places["gradient_checkpointing"] == "default:axolotl" and reading.values["gradient_checkpointing"] is False
    plan = _plan(["axolotl", "train", "cfg.yml"], tmp_path, gradient_checkpointing=True)
    assert plan.argv == ["axolotl", "train", "cfg.yml"]
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "gradient_checkpointing", "old": None, "new": True}]


def _llama_factory(tmp_path: Path) -> None:
    shutil.copy(LF_FULL, tmp_path / "q.yaml")
    ds_dir = tmp_path / "examples" / "deepspeed"  # where qwen3_full_sft.yaml's deepspeed: points
    ds_dir.mkdir(parents=True)
    shutil.copy(LF_DS3, ds_dir / "ds_z3_config.json")


def test_llama_factory_checkpoints_by_default_and_its_deepspeed_json_is_followed(tmp_path):
    _llama_factory(tmp_path)
    command = ["llamafactory-cli", "train", "q.yaml"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "llama-factory"
    assert reading.values["gradient_checkpointing"] is True  # disable_gradient_checkpointing: false by default
    assert reading.places["gradient_checkpointing"] == "default:llama-factory"
    assert reading.values["precision"] == "bf16" and reading.places["precision"] == "file:q.yaml"
    assert reading.values["zero_stage"] == 3 and reading.values["offload_params"] is True
    assert reading.places["zero_stage"] == "file:examples/deepspeed/ds_z3_config.json"
    assert "gradient-checkpointing" not in [s.rung for s in _ladder(command, tmp_path).suggestions]
    ds_before = (tmp_path / "examples" / "deepspeed" / "ds_z3_config.json").read_text()
    plan = _plan(command, tmp_path, gradient_checkpointing=False, micro_batch_size=2)
    assert plan.argv == command  # no --gradient_checkpointing after the YAML
    [edit] = plan.file_edits
    assert {c["key"]: (c["old"], c["new"]) for c in edit.changes} == {
        "per_device_train_batch_size": (1, 2), "disable_gradient_checkpointing": (None, True)}
    # The ZeRO stage is written into the JSON the YAML names; its "auto" batch stays the Trainer's.
    plan = _plan(command, tmp_path, offload_params=False)
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "zero_optimization.offload_param.device", "old": "cpu", "new": "none"}]
    assert json.loads(ds_before)["train_micro_batch_size_per_gpu"] == "auto"


def test_llama_factory_key_value_overrides_are_read_and_edited_in_place(tmp_path):
    _llama_factory(tmp_path)
    command = ["llamafactory-cli", "train", "q.yaml", "per_device_train_batch_size=4",
               "disable_gradient_checkpointing=true"]
    reading = read_job(command, tmp_path)
    assert reading.values["micro_batch_size"] == 4
    assert reading.places["micro_batch_size"] == "argv:per_device_train_batch_size"
    # The override holds the knob inverted: left as written, and not a knob to change.
    assert "gradient_checkpointing" not in reading.values
    assert any("disable_gradient_checkpointing=true" in note for note in reading.notes)
    plan = _plan(command, tmp_path, micro_batch_size=2)
    assert plan.argv == ["llamafactory-cli", "train", "q.yaml", "per_device_train_batch_size=2",
                         "disable_gradient_checkpointing=true"]


def test_llama_factory_pure_bf16_is_read_as_bf16_weights_and_changed_there(tmp_path):
    # LLaMA-Factory's examples/extras/galore/llama3_full_sft.yaml: pure_bf16: true and no bf16 key.
    shutil.copy(CONFIGS.parent / "heldout" / "LLaMA-Factory__examples__extras__galore__llama3_full_sft.yaml",
                tmp_path / "galore.yaml")
    command = ["llamafactory-cli", "train", "galore.yaml"]
    reading = read_job(command, tmp_path)
    assert reading.values["precision"] == "bf16-true" and reading.places["precision"] == "file:galore.yaml"
    [edit] = _plan(command, tmp_path, precision="bf16").file_edits
    assert {c["key"]: (c["old"], c["new"]) for c in edit.changes} == {"bf16": (None, True), "pure_bf16": (True, False)}


def test_accelerate_config_gives_precision_zero_stage_and_world(tmp_path):
    shutil.copy(TRL_ZERO3, tmp_path / "acc.yaml")
    write_hf_script(tmp_path)
    command = ["accelerate", "launch", "--config_file", "acc.yaml", "train.py", "--per_device_train_batch_size", "2"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "hf-trainer"
    assert reading.values["precision"] == "fp16" and reading.places["precision"] == "file:acc.yaml"
    assert reading.values["zero_stage"] == 3 and reading.values["offload_optimizer"] is False
    assert reading.launch == {"nproc_per_node": 8, "nnodes": 1}  # num_processes: 8 on num_machines: 1
    # The Trainer's accumulation is its own flag's, not the plugin's.
    assert reading.places["gradient_accumulation_steps"] == "default:hf-trainer"
    plan = _plan(command, tmp_path, precision="bf16")
    assert plan.argv == command
    [edit] = plan.file_edits
    assert edit.changes == [{"key": "mixed_precision", "old": "fp16", "new": "bf16"}]


@pytest.mark.parametrize(("processes", "machines"), [('"x"', 1), ("0", 1), ("3", 2), ("'4'", 2)])
def test_an_accelerate_process_count_that_is_none_is_said_not_guessed(tmp_path, processes, machines):
    text = TRL_ZERO3.read_text().replace("num_processes: 8", f"num_processes: {processes}")
    (tmp_path / "acc.yaml").write_text(text.replace("num_machines: 1", f"num_machines: {machines}"))
    reading = read_job(["accelerate", "launch", "--config_file", "acc.yaml", "train.py"], tmp_path)
    if processes == "'4'":  # a quoted whole number is that number: 2 processes on each of 2 machines
        assert reading.launch == {"nproc_per_node": 2, "nnodes": 2}
        return
    assert reading.launch == {}
    [note] = [n for n in reading.notes if "num_processes" in n]
    assert note.startswith("acc.yaml: num_processes = ") and note.endswith(f"over {machines} machine(s): the world "
                                                                          "size was not read from it")


def test_accelerate_config_alone_is_all_a_plain_script_says(tmp_path):
    shutil.copy(TRL_ZERO3, tmp_path / "acc.yaml")
    reading = read_job(["accelerate", "launch", "--config_file", "acc.yaml", "train.py"], tmp_path)
    assert reading.framework == "accelerate"
    assert reading.values == {"precision": "fp16", "zero_stage": 3, "gradient_accumulation_steps": 1,
                              "offload_optimizer": False, "offload_params": False}
    assert set(reading.places.values()) == {"file:acc.yaml"}


@pytest.mark.parametrize(("text", "what"), [("", "empty"), ("# all commented out\n", "empty"),
                                            ("- micro_batch_size: 2\n", "a list"), ("42\n", "a number")])
def test_a_config_that_is_no_mapping_is_said_not_passed_over(tmp_path, text, what):
    """axolotl's YAML empty, or a list: axolotl refuses it; gpudoc says why it read no knob from it."""
    (tmp_path / "cfg.yml").write_text(text)
    reading = read_job(["axolotl", "train", "cfg.yml"], tmp_path)
    assert reading.knobs == {}
    assert reading.notes == [f"cfg.yml: not read ({what}, not a mapping of settings)"]


def test_a_config_larger_than_any_real_one_is_not_parsed(tmp_path):
    """A 50 MB YAML took the round-trip parser over ten minutes, three times over: a size bound keeps
    the reading quick, and the note says why nothing was read from it."""
    padding = "".join(f"  - path: data/shard_{i:06d}.jsonl\n" for i in range(40_000))
    (tmp_path / "cfg.yml").write_text(f"base_model: x\nmicro_batch_size: 2\nsequence_len: 512\ndatasets:\n{padding}")
    reading = read_job(["axolotl", "train", "cfg.yml"], tmp_path)
    assert reading.knobs == {}
    assert reading.notes == ["cfg.yml: not read (1.3 MiB: larger than any training config; gpudoc reads at most "
                             "1 MiB)"]
