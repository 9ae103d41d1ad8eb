"""LLaMA-Factory's own parser asked before launch (``read_args`` and its HfArgumentParser over its
argument dataclasses, in the job's interpreter), on its verbatim example configs: the values and
defaults it parses through ``gpudoc run --dry-run --json``, the edit ``--retry-oom`` writes parsed
again by LLaMA-Factory, and gpudoc's own reader, saying so, where LLaMA-Factory is not importable.

LLaMA-Factory's pins contradict the test environment's frameworks (it pins transformers <= 5.6.0,
which still had ``warmup_ratio``), so it is installed beside the venv (``bin/test``) and the job's
interpreter runs with its own switches for that: ``DISABLE_VERSION_CHECK=1`` and
``ALLOW_EXTRA_ARGS=1`` (a key its parser no longer knows is left out, as it does then). Each
question imports torch, transformers and peft (about 12 s of CPU): three in all, one cache.

Configs: examples/train_lora/qwen3_lora_sft_ds3.yaml (tests/fixtures/real/configs) and
examples/train_lora/qwen3_lora_sft.yaml (tests/fixtures/real/heldout), LLaMA-Factory @ ff6d4d12."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from gpudoc.frameworks import asked, llamafactory_asked
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import read_job
from gpudoc.runs.store import RunStore
from tests.conftest import CONFIGS, REPO, VENV_BIN, asked_framework_env, console_script, gpudoc_cli

pytestmark = pytest.mark.slow
LLAMAFACTORY = REPO / ".venv" / "llamafactory"
DS3 = CONFIGS / "LLaMA-Factory__examples__train_lora__qwen3_lora_sft_ds3.yaml"
ZERO3 = CONFIGS / "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json"
SFT = CONFIGS.parent / "heldout" / "LLaMA-Factory__examples__train_lora__qwen3_lora_sft.yaml"
# A stand-in for the training run: the YAML and its overrides as the CLI merges them, and CUDA's
# out-of-memory error above one sample per device.
JOB = """\
import sys
import yaml
from omegaconf import OmegaConf
args = sys.argv[2:]
merged = OmegaConf.merge(OmegaConf.create(yaml.safe_load(open(args[0]))), OmegaConf.from_cli(args[1:]))
micro = merged.per_device_train_batch_size
print(f"micro {micro} accumulation {merged.gradient_accumulation_steps}")
if micro > 2:
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    if not (LLAMAFACTORY / "llamafactory" / "hparams" / "parser.py").is_file():
        pytest.skip("LLaMA-Factory is not installed beside the venv (bin/test installs it)")
    root = tmp_path_factory.mktemp("llamafactory-job")
    (root / "examples" / "deepspeed").mkdir(parents=True)
    shutil.copy(DS3, root / "ds3.yaml")
    shutil.copy(ZERO3, root / "examples" / "deepspeed" / "ds_z3_config.json")
    shutil.copy(SFT, root / "sft.yaml")
    console_script(root / "bin", "llamafactory-cli",
                   f'PYTHONPATH={LLAMAFACTORY} DISABLE_VERSION_CHECK=1 ALLOW_EXTRA_ARGS=1 exec {sys.executable} "$@"', JOB)
    return root


@pytest.fixture(autouse=True)
def _environment(tmp_path_factory, monkeypatch, job):
    asked_framework_env(monkeypatch, tmp_path_factory, job, "llamafactory-read-cache", f"{VENV_BIN}:/usr/bin:/bin")


def _parsed(cwd: Path, command: list[str]) -> dict:
    """LLaMA-Factory's parsed arguments for ``llamafactory-cli ARGS``, asked as gpudoc asks them."""
    python = target_python(command, {"PATH": str(cwd.parent / "bin")}, str(cwd))
    assert python is not None
    return asked.ask({"framework": "llama-factory", "args": command[2:]}, python=python, cwd=cwd,
                     files=[cwd / command[2]], timeout_s=llamafactory_asked.TIMEOUT_S)["fields"]


def test_its_parser_reads_the_verbatim_config_and_its_overrides_through_the_dry_run(job):
    command = ["llamafactory-cli", "train", "ds3.yaml", "per_device_train_batch_size=2", "finetuning_type=full"]
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *command, cwd=job)
    assert done.returncode == 0, done.stderr
    read = {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}
    # The override over the file's 1; accumulation, cutoff_len and bf16 the file's; checkpointing
    # LLaMA-Factory's own default (disable_gradient_checkpointing: false); ZeRO-3 from the JSON it names.
    assert read["micro_batch_size"] == (2, "argv:per_device_train_batch_size")
    assert read["gradient_accumulation_steps"] == (2, "file:ds3.yaml")
    assert read["max_seq_len"] == (2048, "file:ds3.yaml") and read["precision"] == ("bf16", "file:ds3.yaml")
    assert read["gradient_checkpointing"] == (True, "default:llama-factory")
    assert read["zero_stage"] == (3, "file:examples/deepspeed/ds_z3_config.json")
    # finetuning_type=full: LLaMA-Factory trains no LoRA, whatever lora_rank the file holds.
    assert "lora_rank" not in read
    assert "finetuning_type is full: no LoRA is trained; lora_rank 8 (file:ds3.yaml) is not the job's" in done.stderr
    assert "read by llamafactory 0.9.5 itself: its own parser" in done.stderr


def test_the_edit_after_an_oom_is_parsed_by_llamafactory_as_the_job_will(job):
    command = ["llamafactory-cli", "train", "sft.yaml", "per_device_train_batch_size=4"]
    cwd = job / "retry"
    cwd.mkdir()
    shutil.copy(job / "sft.yaml", cwd / "sft.yaml")
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "2", "--", *command, cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")
    assert [r.exit_code for r in records][-1] == 0
    last = list(records[-1].argv)
    # The micro batch halved where the command says it, the accumulation doubled in the file (8 -> 16):
    # LLaMA-Factory's own parser reads the edited command and file so.
    assert last[-1] == "per_device_train_batch_size=2"
    fields = _parsed(cwd, last)
    assert (fields["per_device_train_batch_size"], fields["gradient_accumulation_steps"]) == (2, 16)
    assert fields["cutoff_len"] == 2048 and fields["bf16"] is True


def test_without_llamafactory_importable_gpudocs_own_reader_reads_and_says_so(job, tmp_path, monkeypatch):
    bin_dir = console_script(tmp_path / "bin", "llamafactory-cli", f'exec {sys.executable} "$@"')  # no LLaMA-Factory
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    shutil.copy(SFT, tmp_path / "sft.yaml")
    reading = read_job(["llamafactory-cli", "train", "sft.yaml"], tmp_path)
    assert reading.values["micro_batch_size"] == 1 and reading.values["gradient_accumulation_steps"] == 8
    [note] = [n for n in reading.notes if "could not be asked" in n]
    assert "llama-factory is not importable here (No module named 'llamafactory')" in note
    assert note.endswith("read by gpudoc's own reader")
