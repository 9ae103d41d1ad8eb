"""torchtune's own config loader read before launch: one of its built-in configs (inside the installed
package, named on the command line, no file here) read with the command's overrides merged as its
recipes merge them, changed by overrides and read back by torchtune; gpudoc's own reader, saying
so, where torchtune cannot be imported. torchtune imports torch (seconds): the answers are cached in
one directory for the module, and torchtune is asked twice in all (its config loader only: the
package's own models and datasets are not imported)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoc.frameworks import asked
from gpudoc.job.knobs import read_job
from tests.conftest import VENV_BIN, console_script, gpudoc_cli
from tests.frameworks.test_reading import _plan

pytestmark = pytest.mark.slow
COMMAND = ["tune", "run", "lora_finetune_single_device", "--config", "llama3_2/1B_lora_single_device", "batch_size=2"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("read-cache")


@pytest.fixture
def importable(cache, monkeypatch) -> Path:
    """One cache and one directory to run in (the cwd is part of what is asked: a config may be a file
    there)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    (cache / "job").mkdir(exist_ok=True)
    return cache / "job"


def test_a_builtin_config_is_read_through_torchtune_and_changed_by_overrides(importable):
    tmp_path = importable
    reading = read_job(COMMAND, tmp_path)
    # The package's llama3_2/1B_lora_single_device.yaml: batch_size 4 there, 2 on the command line.
    assert reading.values == {"micro_batch_size": 2, "gradient_accumulation_steps": 8, "precision": "bf16",
                              "gradient_checkpointing": False, "lora_rank": 64, "loss": "chunked"}
    assert reading.places["loss"] == "argv:loss._component_"  # a built-in config: no file here to name
    assert reading.places["micro_batch_size"] == "argv:batch_size"
    assert reading.places["gradient_accumulation_steps"] == "argv:gradient_accumulation_steps"
    assert any("built-in config, read through its config loader" in n for n in reading.notes)
    plan = _plan(COMMAND, tmp_path, micro_batch_size=1, gradient_accumulation_steps=16)
    assert plan.file_edits == []  # the installed file is never edited
    assert plan.argv == [*COMMAND[:-1], "batch_size=1", "gradient_accumulation_steps=16"]
    # torchtune's own merge of the edited command (its recipe parser's): what the job will run with.
    again = asked.ask({"framework": "torchtune", "config": COMMAND[4], "recipe": COMMAND[2], "overrides": plan.argv[5:],
                       "cwd": str(tmp_path)}, python=f"{VENV_BIN}/python", cwd=tmp_path, files=[])
    assert (again["config"]["batch_size"], again["config"]["gradient_accumulation_steps"]) == (1, 16)


def test_dry_run_json_reads_the_builtin_config(importable):
    # The answer is cached by now (the same command in the same directory): no torch import.
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *COMMAND, cwd=importable)
    assert done.returncode == 0, done.stderr
    bindings = {b["knob"]: (b["where"], b["old"]) for b in json.loads(done.stdout)["bindings"]}
    assert bindings["micro_batch_size"] == ("argv:batch_size", 2)
    assert bindings["gradient_accumulation_steps"] == ("argv:gradient_accumulation_steps", 8)


def test_without_torchtune_importable_only_the_overrides_are_read_and_it_says_why(tmp_path, monkeypatch):
    # The job's `tune` runs under an interpreter without site-packages: no torchtune there.
    bin_dir = console_script(tmp_path / "bin", "tune", f'exec {VENV_BIN}/python -S "$@"')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    reading = read_job(COMMAND, tmp_path)
    assert reading.places == {"micro_batch_size": "argv:batch_size"}
    [note] = [n for n in reading.notes if "llama3_2/1B_lora_single_device" in n]
    assert "its config loader could not be asked (torchtune is not importable here (No module named" in note
