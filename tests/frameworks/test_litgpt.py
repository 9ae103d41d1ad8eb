"""LitGPT: a verbatim config from its repository through `gpudoc run --dry-run --json`, its
``--train.key`` flags, and accumulation by LitGPT's own rule, checked with LitGPT's own
``TrainArgs`` (its ``litgpt/args.py``, loaded alone: it needs nothing beyond the standard library).

The config is https://github.com/Lightning-AI/litgpt/blob/26857050fe3ff627cd714fe92f5838f51a3d5efa/config_hub/finetune/llama-2-7b/lora.yaml
(litgpt 0.5.13, the version the test environment installs)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.edits.yamledit import load, plain
from gpudoc.job.knobs import read_job
from gpudoc.profiles.from_job import job_profile
from tests.conftest import CONFIGS, REPO, gpudoc_cli

LORA = CONFIGS / "litgpt__config_hub__finetune__llama-2-7b__lora.yaml"
_ARGS = REPO / ".venv" / "litgpt" / "litgpt" / "args.py"


@pytest.fixture(scope="module")
def train_args() -> Any:
    """LitGPT's own TrainArgs (where the venv has LitGPT; bin/test installs it)."""
    if not _ARGS.is_file():
        pytest.skip("LitGPT is not installed beside the venv (bin/test installs it)")
    spec = importlib.util.spec_from_file_location("litgpt_args", _ARGS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TrainArgs


def _accumulation(train_args: Any, config: dict[str, Any], devices: int, nodes: int) -> int:
    train = config["train"]
    return train_args(global_batch_size=train["global_batch_size"], micro_batch_size=train["micro_batch_size"]
                      ).gradient_accumulation_iters(devices, nodes)


def test_the_verbatim_config_is_read_through_the_dry_run(isolated_home, train_args):
    shutil.copy(LORA, isolated_home / "lora.yaml")
    command = ["litgpt", "finetune", "meta-llama/Llama-2-7b-hf", "--config", "lora.yaml"]
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *command, cwd=isolated_home)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    read = {b["knob"]: (b["old"], b["where"]) for b in doc["bindings"]}
    # lora.yaml: micro_batch_size 2, global_batch_size 8, devices 1, max_seq_length 512, precision
    # bf16-true, lora_r 32; accumulation 8 // 1 // 2, as LitGPT computes it.
    config = plain(load(LORA.read_text(), "lora.yaml"))
    assert read == {"micro_batch_size": (2, "file:lora.yaml"), "max_seq_len": (512, "file:lora.yaml"),
                    "precision": ("bf16-true", "file:lora.yaml"), "lora_rank": (32, "file:lora.yaml"),
                    "gradient_accumulation_steps": (_accumulation(train_args, config, 1, 1), "file:lora.yaml")}
    assert read["gradient_accumulation_steps"][0] == 4
    assert doc["argv"] == command and doc["file_edits"] == []


def test_flags_after_the_config_win_and_the_world_comes_from_devices_and_nodes(tmp_path):
    shutil.copy(LORA, tmp_path / "lora.yaml")
    command = ["litgpt", "finetune", "meta-llama/Llama-2-7b-hf", "--config", "lora.yaml", "--train.micro_batch_size",
               "1", "--devices", "2", "--num_nodes=2", "--train.global_batch_size=64", "--precision", "bf16-mixed"]
    reading = read_job(command, tmp_path)
    assert reading.framework == "litgpt" and reading.launch == {"nproc_per_node": 2, "nnodes": 2}
    assert reading.values == {"micro_batch_size": 1, "gradient_accumulation_steps": 64 // 4 // 1,
                              "max_seq_len": 512, "precision": "bf16", "lora_rank": 32}
    assert reading.places["micro_batch_size"] == "argv:--train.micro_batch_size"
    assert reading.places["gradient_accumulation_steps"] == "argv:--train.global_batch_size"


def test_a_command_with_no_config_takes_the_commands_own_defaults(tmp_path):
    reading = read_job(["litgpt", "finetune_full", "EleutherAI/pythia-160m", "--devices", "4"], tmp_path)
    # finetune/full.py's setup(): global_batch_size 16, micro_batch_size 1, no LoRA
    assert reading.values == {"micro_batch_size": 1, "gradient_accumulation_steps": 16 // 4}
    assert reading.places["micro_batch_size"] == "default:litgpt"
    # pretrain's devices is "auto": the accumulation is LitGPT's to count at launch, and said so.
    reading = read_job(["litgpt", "pretrain", "pythia-14m", "--train.micro_batch_size", "2"], tmp_path)
    assert reading.values == {"micro_batch_size": 2} and reading.launch == {}
    assert any("devices = auto" in note for note in reading.notes)


def test_a_config_it_cannot_read_leaves_the_defaults_it_may_replace_unknown(tmp_path):
    # LitGPT's tutorials/pretrain.md gives the config as a URL (config_hub/pretrain/debug.yaml, whose
    # micro batch is 5): pretrain's own default, 4, would be a wrong answer, not a reading.
    url = "https://raw.githubusercontent.com/Lightning-AI/litgpt/main/config_hub/pretrain/debug.yaml"
    reading = read_job(["litgpt", "pretrain", "pythia-14m", "--config", url], tmp_path)
    assert reading.framework == "litgpt" and reading.values == {}
    assert any(f"--config {url} not read" in note for note in reading.notes)
    # A flag after the file still settles what it names.
    reading = read_job(["litgpt", "pretrain", "pythia-14m", "--config", url, "--train.micro_batch_size", "2"], tmp_path)
    assert reading.values == {"micro_batch_size": 2}


def _plan(command: list[str], cwd: Path, **changes: Any) -> Any:
    return plan_bindings(job_profile(command, cwd).with_train(changes).for_planning(), command, cwd=cwd)


def test_halving_the_micro_batch_in_the_config_keeps_litgpts_own_accumulation_arithmetic(tmp_path, train_args):
    shutil.copy(LORA, tmp_path / "lora.yaml")
    command = ["litgpt", "finetune", "meta-llama/Llama-2-7b-hf", "--config", "lora.yaml", "--devices", "2"]
    before = read_job(command, tmp_path).values["gradient_accumulation_steps"]
    assert before == 8 // 2 // 2
    plan = _plan(command, tmp_path, micro_batch_size=1, gradient_accumulation_steps=before * 2)
    assert plan.argv == command
    [edit] = plan.file_edits
    edited = plain(load(edit.new_text, "lora.yaml"))
    assert edited["train"]["micro_batch_size"] == 1 and edited["train"]["global_batch_size"] == 8
    assert _accumulation(train_args, edited, 2, 1) == before * 2


def test_flags_are_written_as_train_flags_with_the_global_batch_litgpt_divides(tmp_path, train_args):
    command = ["litgpt", "finetune", "m", "--train.micro_batch_size", "4", "--train.global_batch_size", "64",
               "--devices", "2"]
    plan = _plan(command, tmp_path, micro_batch_size=2, gradient_accumulation_steps=16)
    assert plan.argv == ["litgpt", "finetune", "m", "--train.micro_batch_size", "2", "--train.global_batch_size",
                         "64", "--devices", "2"]
    assert train_args(global_batch_size=64, micro_batch_size=2).gradient_accumulation_iters(2, 1) == 16
    plan = _plan(command, tmp_path, gradient_accumulation_steps=4)
    assert plan.argv[plan.argv.index("--train.global_batch_size") + 1] == str(4 * 4 * 2)
