"""A knob the job's command or config sets to a value no framework can train with is named, with the
file or flag that says it, and stops the reading: never replaced by the framework's default, never
handed to the estimate or the ladder (an accumulation of 0, a batch of 10**30)."""

from __future__ import annotations

import json

import pytest

from gpudoc.errors import ExitStatus, InputError
from gpudoc.job.knobs import read_job
from tests.conftest import gpudoc_cli

AXOLOTL = ["axolotl", "train", "cfg.yml"]


@pytest.mark.parametrize("value", ["eight", "8.5", "true", "{a: 1}", "[8]", "0", "-1", "1e30",
                                   "100000000000000000000000000000"])
def test_an_unusable_batch_in_a_trainers_yaml_is_an_error_naming_the_file(tmp_path, value):
    (tmp_path / "cfg.yml").write_text(f"base_model: x\nsequence_len: 512\nmicro_batch_size: {value}\n")
    with pytest.raises(InputError, match=r"^cfg\.yml: micro_batch_size = .*: expected a whole number from 1 to "):
        read_job(AXOLOTL, tmp_path)


@pytest.mark.parametrize(("text", "key"), [
    ("per_device_train_batch_size: 4\ngradient_accumulation_steps: 0\n", "gradient_accumulation_steps"),
    ("per_device_train_batch_size: '4.5'\n", "micro_batch_size"),
])
def test_llama_factory_yaml_values_are_checked_too(tmp_path, text, key):
    (tmp_path / "sft.yaml").write_text("stage: sft\ncutoff_len: 1024\n" + text)
    with pytest.raises(InputError, match=rf"^sft\.yaml: {key} = "):
        read_job(["llamafactory-cli", "train", "sft.yaml"], tmp_path)


def test_placeholders_and_absent_values_are_no_value_not_an_error(tmp_path):
    (tmp_path / "cfg.yml").write_text("base_model: x\nsequence_len: 512\nmicro_batch_size: null\n"
                                      "gradient_accumulation_steps: ${oc.env:ACCUM}\n")
    assert read_job(AXOLOTL, tmp_path).places["micro_batch_size"] == "default:axolotl"
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                  "gradient_accumulation_steps": "auto"}))
    reading = read_job(["torchrun", "train.py", "--deepspeed", "ds.json", "--per_device_train_batch_size", "4"],
                       tmp_path)
    assert reading.values["micro_batch_size"] == 4


@pytest.mark.parametrize("flags", [
    ["--per_device_train_batch_size", "eight"],
    ["--per_device_train_batch_size=8.5"],
    ["--per_device_train_batch_size", "8", "--per_device_train_batch_size", "0"],
    ["--gradient_accumulation_steps", "-2"],
])
def test_an_unusable_flag_value_is_an_error_naming_the_flag(tmp_path, flags):
    with pytest.raises(InputError, match=r"^--(per_device_train_batch_size|gradient_accumulation_steps) "):
        read_job(["python", "train.py", "--output_dir", "o", *flags], tmp_path)


def test_a_count_flag_that_ends_the_command_with_no_value_is_an_error_not_the_default(tmp_path):
    with pytest.raises(InputError, match=r"^--per_device_train_batch_size: no value after it"):
        read_job(["python", "train.py", "--output_dir", "o", "--per_device_train_batch_size"], tmp_path)
    reading = read_job(["python", "train.py", "--output_dir", "o", "--per_device_train_batch_size", "4"], tmp_path)
    assert reading.values["micro_batch_size"] == 4


def test_a_deepspeed_json_batch_of_the_wrong_type_is_an_error(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "eight",
                                                  "zero_optimization": {"stage": 2}}))
    with pytest.raises(InputError, match=r"^ds\.json: micro_batch_size = 'eight'"):
        read_job(["deepspeed", "train.py", "--deepspeed_config", "ds.json"], tmp_path)


def test_a_quoted_whole_number_is_that_number_not_an_error(tmp_path):
    # pydantic (axolotl) and jsonargparse coerce "8": refusing it would stop a job that runs.
    (tmp_path / "cfg.yml").write_text("base_model: x\nsequence_len: '512'\nmicro_batch_size: '8'\n")
    reading = read_job(AXOLOTL, tmp_path)
    assert reading.values["micro_batch_size"] == 8 and reading.values["max_seq_len"] == 512


def test_torchtune_override_values_are_checked(tmp_path):
    with pytest.raises(InputError, match=r"^batch_size=eight: "):
        read_job(["tune", "run", "full_finetune_single_device", "--config", "llama3_2/3B_full", "batch_size=eight"],
                 tmp_path)


def test_the_cli_says_it_in_one_line_and_refuses(tmp_path):
    (tmp_path / "cfg.yml").write_text("base_model: x\nsequence_len: 512\nmicro_batch_size: eight\n")
    # `run` refuses before launch with 125, never a status the job could have had (SPEC, run).
    for switches, status in ((["run", "--dry-run"], ExitStatus.LAUNCH_REFUSED), (["estimate"], ExitStatus.USAGE)):
        done = gpudoc_cli(*switches, "--", *AXOLOTL, cwd=tmp_path)
        assert done.returncode == status, done.stderr
        assert done.stderr.strip().splitlines() == [
            "gpudoc: cfg.yml: micro_batch_size = 'eight': expected a whole number from 1 to 1000000"]
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *AXOLOTL, cwd=tmp_path)
    error = json.loads(done.stdout)["error"]
    assert (error["file"], error["key"]) == ("cfg.yml", "micro_batch_size")
    assert error["message"].endswith("cfg.yml: micro_batch_size = 'eight': expected a whole number from 1 to 1000000")
