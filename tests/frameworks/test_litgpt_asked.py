"""LitGPT's own parser asked before launch (its command's ``setup()`` through jsonargparse, in the
job's interpreter): the verbatim config hub file and a second ``--config`` layered over it, flags,
the command's defaults by installed version, and the accumulation LitGPT's own ``TrainArgs``
counts, equal to gpudoc's arithmetic; the edit parsed again by LitGPT's parser; gpudoc's own reader,
saying so, where LitGPT cannot be imported.

LitGPT's pins contradict the test environment's frameworks, so it is installed beside the venv
(``bin/test``), and the job's ``litgpt`` runs under an interpreter that puts it on the path. Its
training commands import torch and Lightning (seconds): two questions in all, one cache."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from gpudoc.frameworks import asked, litgpt_asked
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import read_job
from tests.conftest import CONFIGS, REPO, asked_framework_env, console_script, gpudoc_cli
from tests.frameworks.test_reading import _plan

pytestmark = pytest.mark.slow
LITGPT = REPO / ".venv" / "litgpt"
LORA = CONFIGS / "litgpt__config_hub__finetune__llama-2-7b__lora.yaml"
COMMAND = ["litgpt", "finetune", "meta-llama/Llama-2-7b-hf", "--config", "lora.yaml", "--config", "small.yaml",
           "--devices", "2"]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    if not (LITGPT / "litgpt" / "args.py").is_file():
        pytest.skip("LitGPT is not installed beside the venv (bin/test installs it)")
    root = tmp_path_factory.mktemp("litgpt-job")
    shutil.copy(LORA, root / "lora.yaml")
    (root / "small.yaml").write_text("train:\n  micro_batch_size: 1\n  global_batch_size: 32\n")
    console_script(root / "bin", "litgpt", f'PYTHONPATH={LITGPT} exec {sys.executable} "$@"',
                   "from litgpt.__main__ import main\nmain()\n")
    return root


@pytest.fixture(autouse=True)
def _environment(tmp_path_factory, monkeypatch, job):
    asked_framework_env(monkeypatch, tmp_path_factory, job, "litgpt-read-cache", "/usr/bin:/bin")


def _ask(job: Path, args: list[str]) -> dict:
    """LitGPT's parser, asked as gpudoc asks it for ``litgpt ARGS``."""
    python = target_python(["litgpt", *args], os.environ, str(job))
    assert python is not None
    return asked.ask({"framework": "litgpt", "command": args[0], "args": args[1:], "cwd": str(job.resolve())},
                     python=python, cwd=job, files=[job / "lora.yaml", job / "small.yaml"],
                     timeout_s=litgpt_asked.TIMEOUT_S)


def test_layered_configs_and_flags_are_read_by_litgpts_parser_and_edited_with_flags(job):
    reading = read_job(COMMAND, job)
    assert reading.framework == "litgpt" and reading.launch == {"nproc_per_node": 2, "nnodes": 1}
    # small.yaml over lora.yaml: micro 1 (lora.yaml says 2), global 32; 32 // 2 devices // 1 = 16.
    assert reading.values == {"micro_batch_size": 1, "gradient_accumulation_steps": 16, "max_seq_len": 512,
                              "precision": "bf16-true", "lora_rank": 32}
    answer = _ask(job, COMMAND[1:])  # the reading's own answer, from the cache
    assert answer["accumulation"] == reading.values["gradient_accumulation_steps"]  # LitGPT's TrainArgs says so too
    assert reading.places["micro_batch_size"] == "argv:--train.micro_batch_size"  # two files set it
    assert reading.places["lora_rank"] == "file:lora.yaml"
    assert any("train.micro_batch_size (set by lora.yaml then small.yaml)" in n for n in reading.notes)
    plan = _plan(COMMAND, job, micro_batch_size=2, gradient_accumulation_steps=4)
    assert plan.file_edits == []  # lora.yaml's values are overridden by small.yaml: neither is edited
    assert plan.argv == [*COMMAND, "--train.micro_batch_size", "2", "--train.global_batch_size", "16"]
    again = _ask(job, plan.argv[1:])  # LitGPT's parser takes the edited command as the job will
    assert again["config"]["train"]["micro_batch_size"] == 2 and again["accumulation"] == 4


def test_without_litgpt_importable_gpudocs_own_reader_reads_and_says_so(job, tmp_path, monkeypatch):
    bin_dir = console_script(tmp_path / "bin", "litgpt", f'exec {sys.executable} -S "$@"')  # no site-packages
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    shutil.copy(LORA, tmp_path / "lora.yaml")
    reading = read_job(["litgpt", "finetune", "m", "--config", "lora.yaml"], tmp_path)
    assert reading.values["micro_batch_size"] == 2
    [note] = [n for n in reading.notes if "could not be asked" in n]
    assert "litgpt is not importable here (No module named" in note and "gpudoc's own reader" in note


def test_dry_run_json_reads_the_cached_answer(job):
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *COMMAND, cwd=job)
    assert done.returncode == 0, done.stderr
    bindings = {b["knob"]: (b["where"], b["old"]) for b in json.loads(done.stdout)["bindings"]}
    assert bindings["micro_batch_size"] == ("argv:--train.micro_batch_size", 1)
    assert bindings["gradient_accumulation_steps"][1] == 16
