"""bench/read_rate.py's collections of real commands (the seen one and the held-out one) stay runnable:
every entry names fixture files that exist, a framework gpudoc knows and knobs of the profile's
vocabulary; the scoring of a knob the job does not have; the programs an entry runs with (a front-end
installed beside the venv on its interpreter's path, gpudoc's reader helper refused for ``--fallback``);
who read a command, as the dry-run's notes and the reader helper's answers say; entries read end to end through
the harness, one by gpudoc's own reader alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpudoc.frameworks import asked, hf_asked, llamafactory_asked
from gpudoc.frameworks.registry import get as framework
from gpudoc.job.argv import parse_command
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import JobReading
from gpudoc.profiles.schema import TABLES
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import read_rate  # a script beside the others, not a package

ENTRIES = [entry for name in read_rate.COLLECTIONS for entry in read_rate.load(name)]


def _entry(name: str) -> dict:
    [entry] = [e for e in ENTRIES if e["id"] == name]
    return entry


def test_ids_are_unique_over_both_collections():
    assert len({e["id"] for e in ENTRIES}) == len(ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["id"])
def test_every_entry_is_whole(entry):
    assert all(read_rate.fixture(source).exists() for source in entry["files"].values())
    assert framework(entry["framework"]) is not None
    assert set(entry["truth"]) <= set(TABLES["train"])  # the knobs a profile names
    assert len(entry["source"]) > 20 and entry["command"]


def test_a_knob_the_job_does_not_have_is_wrong_when_read():
    # A full fine-tune's truth says lora_rank null: LLaMA-Factory's default rank 8 read for it is wrong.
    assert read_rate.score("lora_rank", 8, None) == 2 and read_rate.score("lora_rank", None, None) == 0
    assert read_rate.score("lora_rank", None, 16) == 1 and read_rate.score("lora_rank", 16, 16) == 0
    assert read_rate.score("precision", "bf16-true", "bf16") == 0  # LitGPT's and Lightning's spelling
    assert _entry("llamafactory-galore-pure-bf16")["truth"]["lora_rank"] is None  # finetuning_type: full


def test_who_read_a_command_is_what_the_readers_notes_say(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no framework's program: none can be asked
    (tmp_path / "sft.yaml").write_text("finetuning_type: lora\n")
    unasked = JobReading()
    llamafactory_asked.settle(parse_command(["llamafactory-cli", "train", "sft.yaml"]), tmp_path, unasked,
                              "sft.yaml", "llama-factory")
    hf_asked.ask(parse_command(["trl", "sft"]), tmp_path, unasked, {}, [], "trl: TRL's own parser")
    assert [read_rate.who_read([note]) for note in unasked.notes] == ["fallback", "fallback"]
    answered = JobReading()
    asked.settle(answered, {"versions": {"llamafactory": "0.9.5"}}, [], "llama-factory", package="llamafactory",
                 how="its own parser", unused={})
    assert read_rate.who_read(answered.notes) == "asked"
    assert read_rate.who_read([*answered.notes, *unasked.notes]) == "fallback"  # one layer not asked: said so
    assert read_rate.who_read(["deepspeed: train_batch_size 24 = 3 x 2 x 4"]) == ""
    assert read_rate.who_read([], answered=True) == "asked"  # HF's, TRL's, Hydra's readers ask without a note


def test_a_front_end_installed_beside_the_venv_runs_under_an_interpreter_that_has_it(tmp_path):
    if not (read_rate.VENV_BIN.parent / "llamafactory" / "llamafactory").is_dir():
        pytest.skip("LLaMA-Factory is not installed beside the venv (bin/test installs it)")
    assert read_rate.programs(tmp_path, "hf-trainer") is None  # the venv's own programs serve
    bin_dir = read_rate.programs(tmp_path, "llama-factory")
    assert bin_dir is not None and read_rate.programs(tmp_path, "llama-factory") == bin_dir  # made once
    # gpudoc finds the job's interpreter through the program's #! line: the shim, not the venv's python.
    assert target_python(["llamafactory-cli", "train", "x.yaml"], {"PATH": str(bin_dir)}) == str(bin_dir / "python")
    assert target_python(["torchrun", "x.py"], {"PATH": str(bin_dir)}) == str(bin_dir / "python")
    done = subprocess.run([bin_dir / "python", "-c", "import importlib.util, os; print(importlib.util.find_spec("
                           "'llamafactory') is not None, os.environ['DISABLE_VERSION_CHECK'], "
                           "os.environ['ALLOW_EXTRA_ARGS'])"], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "1", "1"]


def test_fallback_refuses_the_reader_helper_and_nothing_else(tmp_path):
    bin_dir = read_rate.programs(tmp_path, "hf-trainer", fallback=True)
    assert bin_dir is not None and (bin_dir / "accelerate").read_text().startswith(f"#!{bin_dir / 'python'}\n")
    with pytest.raises(asked.Unanswered, match="the bench measures gpudoc's own readers alone"):
        asked.ask({"framework": "hf"}, python=str(bin_dir / "python"), cwd=tmp_path, files=[])
    done = subprocess.run([bin_dir / "python", "-c", "import yaml; print('imported')"],
                          capture_output=True, text=True)
    assert done.stdout == "imported\n"


def test_an_entry_is_read_through_the_users_path(tmp_path):
    entry = _entry("deepspeed-megatron-zero3")
    (tmp_path / "job").mkdir()
    read = read_rate.read_values(entry, tmp_path / "job", tmp_path)
    assert {knob: read.values.get(knob) for knob in entry["truth"]} == entry["truth"]
    assert read.reader == "" and not read.error  # DeepSpeed's JSON: nothing to ask, and no note says


def test_an_entry_whose_reader_asks_without_a_note_is_counted_asked_by_the_helpers_answer(tmp_path):
    entry = _entry("hydra-ddp-4")  # Hydra's compose API in the job's interpreter: a second, no torch
    (tmp_path / "job").mkdir()
    read = read_rate.read_values(entry, tmp_path / "job", tmp_path)
    assert read.reader == "asked" and read.values["gradient_accumulation_steps"] == 1  # the Trainer's default


def test_an_entry_is_read_by_gpudocs_own_reader_alone_with_fallback(tmp_path):
    entry = _entry("llamafactory-lora-pretrain")
    (tmp_path / "job").mkdir()
    read = read_rate.read_values(entry, tmp_path / "job", tmp_path, fallback=True)
    assert read.reader == "fallback"
    assert {knob: read.values.get(knob) for knob in entry["truth"]} == entry["truth"]
