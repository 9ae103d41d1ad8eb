"""HF's own argument parsing asked before launch: the installed transformers' ``HfArgumentParser``
over ``TrainingArguments`` (or the TRL config the script imports) parses the command and its args
file in the job's interpreter; its declared flags are the only ones written; gpudoc's own reader
when it cannot be asked, saying so. Each reading that asks costs one helper run (it imports torch):
the answers share one cache for the module."""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from gpudoc.bind.args import ArgContext
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import asked, hf_trainer, trl
from gpudoc.job.installed import parse_version
from gpudoc.job.knobs import read_job
from tests.frameworks.test_reading import _plan
from tests.job.scripts import HF_TRAINER, TRL_SFT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("read-cache")


@pytest.fixture(autouse=True)
def _shared_cache(cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


COMMAND = ["python", "run_clm.py", "--model_name_or_path", "gpt2", "--output_dir", "out", "--bf16",
           "--activation_checkpointing", "--per_device_train_batch_size=4", "--max_seq_length", "512"]


def test_the_installed_transformers_parses_the_command_and_says_what_it_cannot_import(tmp_path):
    (tmp_path / "run_clm.py").write_text(HF_TRAINER)
    reading = read_job(COMMAND, tmp_path)
    assert reading.places == {"micro_batch_size": "argv:--per_device_train_batch_size",
                              "gradient_accumulation_steps": "default:hf-trainer",
                              "gradient_checkpointing": "argv:--activation_checkpointing",
                              "precision": "argv:--bf16", "max_seq_len": "argv:--max_seq_length"}
    # bf16 on a machine with no GPU visible: the job's GPU decides it, not the reading's.
    assert reading.values == {"micro_batch_size": 4, "gradient_accumulation_steps": 1,
                              "gradient_checkpointing": True, "precision": "bf16", "max_seq_len": 512}
    # The script's own ModelArguments are its code: not imported, so --model_name_or_path is not the parser's.
    assert reading.declared is not None and "--per_device_train_batch_size" in reading.declared
    assert "--model_name_or_path" not in reading.declared
    [note] = [n for n in reading.notes if "script's own" in n]
    assert f"transformers {version('transformers')}'s HfArgumentParser was asked for TrainingArguments only" in note
    assert "max_seq_len (--max_seq_length) is a flag of the script's own argument dataclasses" in note
    # The same request again is the cached answer: no second helper run.
    again = asked.ask({"framework": "hf-trainer", "args": COMMAND[2:], "config": None, "trl_classes": []},
                      python=sys.executable, cwd=tmp_path, files=[])
    assert again.get("cached") is True and again["fields"]["per_device_train_batch_size"] == 4


def test_a_json_args_file_given_first_is_parsed_with_the_flags_after_it(tmp_path):
    (tmp_path / "run_clm.py").write_text(HF_TRAINER)
    (tmp_path / "args.json").write_text(json.dumps({"model_name_or_path": "gpt2", "output_dir": "out",
                                                     "per_device_train_batch_size": 3, "fp16": True}))
    reading = read_job(["python", "run_clm.py", "args.json", "--gradient_accumulation_steps", "2"], tmp_path)
    assert reading.places["micro_batch_size"] == "file:args.json:per_device_train_batch_size"
    assert reading.places["precision"] == "file:args.json:fp16"
    assert reading.places["gradient_accumulation_steps"] == "argv:--gradient_accumulation_steps"
    assert (reading.values["micro_batch_size"], reading.values["precision"]) == (3, "fp16")


def test_a_script_building_trls_config_gets_that_configs_defaults_by_installed_release(tmp_path):
    (tmp_path / "sft.py").write_text(TRL_SFT)
    (tmp_path / "sft.yaml").write_text("model_name_or_path: Qwen/Qwen2-0.5B\nper_device_train_batch_size: 2\n")
    reading = read_job(["python", "sft.py", "--config", "sft.yaml", "--output_dir", "out"], tmp_path)
    # TrlParser's --config YAML, under the flags (its ModelConfig key is the script's: left alone).
    assert (reading.values["micro_batch_size"], reading.places["micro_batch_size"]) == \
        (2, "file:sft.yaml:per_device_train_batch_size")
    [edit] = _plan(["python", "sft.py", "--config", "sft.yaml", "--output_dir", "out"], tmp_path,
                   micro_batch_size=1).file_edits
    assert edit.path.name == "sft.yaml" and edit.changes == [{"key": "per_device_train_batch_size", "old": 2, "new": 1}]
    release = parse_version(version("trl"))
    assert release is not None
    # SFTConfig's own: checkpointing on from 0.22, bf16 unless fp16 from 0.19 (resolved by its __post_init__).
    assert reading.values["gradient_checkpointing"] is (release >= (0, 22))
    assert reading.values["precision"] == ("bf16" if release >= (0, 19) else "fp32")
    assert reading.places["precision"] == "default:hf-trainer"
    assert reading.declared is not None and "--max_length" in reading.declared  # SFTConfig's own flag
    assert not any("stay unknown" in note for note in reading.notes)


def test_an_interpreter_without_transformers_is_read_by_hand_with_one_note(tmp_path):
    python = tmp_path / "python"  # the job's interpreter, with no site-packages
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    (tmp_path / "run_clm.py").write_text(HF_TRAINER)
    reading = read_job([str(python), "run_clm.py", "--per_device_train_batch_size", "4"], tmp_path)
    assert reading.values == {"micro_batch_size": 4, "gradient_accumulation_steps": 1,
                              "gradient_checkpointing": False, "precision": "fp32"}
    assert reading.declared is None
    [note] = [n for n in reading.notes if "could not be asked" in n]
    assert "is not importable here" in note and note.endswith("read by gpudoc's own reader")


def test_a_flag_the_installed_parser_does_not_declare_is_never_written():
    # transformers 4 declares only --gradient_checkpointing; a later one may keep only the new name.
    old = ArgContext(1, declared=frozenset({"--gradient_checkpointing", "--bf16", "--fp16"}))
    new = ArgContext(1, declared=frozenset({"--activation_checkpointing", "--bf16", "--fp16"}))
    for ctx, flag in ((old, "--gradient_checkpointing"), (new, "--activation_checkpointing")):
        ed = ArgEdits(["--activation_checkpointing", "false"] if ctx is old else [])
        res = hf_trainer.edit_args(ed, {"gradient_checkpointing": True}, ctx)
        assert flag in ed.result() and "gradient_checkpointing" in res.expressed
    res = hf_trainer.edit_args(ArgEdits([]), {"precision": "bf16"}, ArgContext(1, declared=frozenset()))
    assert "--bf16" in res.cannot["precision"]
    # TRL before 0.17 named SFT's length max_seq_length; a release that declares neither gets no flag.
    ed = ArgEdits([])
    trl.edit_args(ed, {"max_seq_len": 512}, ArgContext(1, declared=frozenset({"--max_seq_length"})))
    assert ed.result() == ["--max_seq_length", "512"]
    res = trl.edit_args(ArgEdits([]), {"max_seq_len": 512, "gradient_checkpointing": True},
                        ArgContext(1, declared=frozenset()))
    assert set(res.cannot) == {"max_seq_len", "gradient_checkpointing"}
