"""axolotl's own CLI and config schema asked before launch (in the job's interpreter), on its verbatim
example configs: ``axolotl train``'s click options and ``-m axolotl.cli.train``'s fire flags set over
the YAML and validated by its pydantic schema, through ``gpudoc run --dry-run --json``; the edit
``--retry-oom`` writes read again by axolotl; a command axolotl itself refuses; gpudoc's own reader,
saying so, where axolotl is not importable.

axolotl pins exact releases of nearly every framework in the test environment, so it is installed
beside the venv with the few small modules its CLI and config imports need (``bin/test``). Each
question imports torch, transformers and peft (about 10 s of CPU): five in all, one cache.

Configs (axolotl @ 067b021c, tests/fixtures/real/heldout): examples/llama-3/lora-1b.yml (micro 2,
accumulation 2, LoRA rank 16), deepspeed_configs/zero1.json; examples/archived/stablelm-2/1.6b/fft.yml,
which axolotl 0.19 refuses (its flash_attn_rms_norm is no longer supported)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from gpudoc.frameworks import asked, axolotl_asked
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import read_job
from gpudoc.runs.store import RunStore
from tests.conftest import REPO, VENV_BIN, asked_framework_env, console_script, gpudoc_cli

pytestmark = pytest.mark.slow
AXOLOTL = REPO / ".venv" / "axolotl"
HELDOUT = REPO / "tests" / "fixtures" / "real" / "heldout"
LORA = HELDOUT / "axolotl__examples__llama-3__lora-1b.yml"
FFT = HELDOUT / "axolotl__examples__archived__stablelm-2__1.6b__fft.yml"
ZERO1 = HELDOUT / "axolotl__deepspeed_configs__zero1.json"
# axolotl's docs/cli.qmd: "Train and set/override specific options".
COMMAND = ["axolotl", "train", "config.yml", "--learning-rate", "1e-4", "--micro-batch-size", "2", "--num-epochs", "3"]
# A stand-in for the training run: the YAML's micro batch, or the option after it, and CUDA's
# out-of-memory error above one sample per device.
JOB = """\
import sys
import yaml
args = sys.argv[1:]
cfg = yaml.safe_load(open(args[1]))
micro = int(args[args.index("--micro-batch-size") + 1]) if "--micro-batch-size" in args else cfg["micro_batch_size"]
print(f"micro {micro} accumulation {cfg['gradient_accumulation_steps']}")
if micro > 1:
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    if not (AXOLOTL / "axolotl" / "utils" / "config" / "__init__.py").is_file():
        pytest.skip("axolotl is not installed beside the venv (bin/test installs it)")
    root = tmp_path_factory.mktemp("axolotl-job")
    shutil.copy(LORA, root / "config.yml")
    shutil.copy(FFT, root / "fft.yml")
    (root / "deepspeed_configs").mkdir()
    shutil.copy(ZERO1, root / "deepspeed_configs" / "zero1.json")
    for name, body in (("axolotl", JOB), ("accelerate", "import sys\n")):
        console_script(root / "bin", name, f'PYTHONPATH={AXOLOTL} exec {sys.executable} "$@"', body)
    return root


@pytest.fixture(autouse=True)
def _environment(tmp_path_factory, monkeypatch, job):
    asked_framework_env(monkeypatch, tmp_path_factory, job, "axolotl-read-cache", f"{VENV_BIN}:/usr/bin:/bin")


def test_its_cli_options_over_the_yaml_are_read_and_the_edit_after_an_oom_is_read_so_by_axolotl(job):
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *COMMAND, cwd=job)
    assert done.returncode == 0, done.stderr
    read = {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}
    assert read["micro_batch_size"] == (2, "argv:--micro-batch-size")
    assert read["gradient_accumulation_steps"] == (2, "file:config.yml") and read["lora_rank"] == (16, "file:config.yml")
    assert read["max_seq_len"] == (2048, "file:config.yml") and read["gradient_checkpointing"] == (True, "file:config.yml")
    assert ("read by axolotl 0.19.0 itself: the options of its `axolotl train` set over the YAML, then its config "
            "schema") in done.stderr
    # The same job runs out of memory: the micro batch halves on the command line, the accumulation
    # doubles in the YAML, and axolotl's own CLI and schema read the edited command and file so.
    ran = gpudoc_cli("run", "--no-check", "--retry-oom", "2", "--", *COMMAND, cwd=job, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    last = sorted(RunStore(job / ".gpudoc").records(), key=lambda r: r.started_at or "")[-1]
    assert last.argv == [*COMMAND[:6], "1", *COMMAND[7:]] and last.exit_code == 0
    python = target_python(COMMAND, {"PATH": str(job / "bin")}, str(job))
    assert python is not None
    answer = asked.ask({"framework": "axolotl", "entry": "cli", "config": "config.yml", "args": last.argv[3:]},
                       python=python, cwd=job, files=[job / "config.yml"], timeout_s=axolotl_asked.TIMEOUT_S)
    assert (answer["config"]["micro_batch_size"], answer["config"]["gradient_accumulation_steps"]) == (1, 4)


def test_the_module_entry_reads_its_flags_as_fire_does(job):
    command = ["accelerate", "launch", "-m", "axolotl.cli.train", "config.yml", "--deepspeed",
               "deepspeed_configs/zero1.json", "--micro_batch_size=2", "--gradient_checkpointing"]
    reading = read_job(command, job)
    # fire: --micro_batch_size=2 sets the key; --gradient_checkpointing before nothing is a switch, true.
    assert reading.values["micro_batch_size"] == 2 and reading.values["zero_stage"] == 1
    assert any("axolotl 0.19.0 itself: fire's parse of -m axolotl.cli.train's flags" in note for note in reading.notes)


def test_a_value_option_takes_the_next_token_as_axolotls_cli_does_and_axolotl_refuses_it(job):
    # `--bf16 --micro-batch-size 2`: axolotl's click CLI takes "--micro-batch-size" as bf16's value,
    # which its schema refuses; the job would stop there. gpudoc's own reader reads on, and says why.
    reading = read_job(["axolotl", "train", "config.yml", "--bf16", "--micro-batch-size", "2"], job)
    [note] = [n for n in reading.notes if "could not be asked" in n]
    assert "axolotl's config schema refuses bf16" in note and "'--micro-batch-size'" in note
    # An archived example this release no longer takes: axolotl's own words.
    reading = read_job(["axolotl", "train", "fft.yml"], job)
    [note] = [n for n in reading.notes if "could not be asked" in n]
    assert "`flash_attn_rms_norm` is no longer supported" in note


def test_without_axolotl_importable_gpudocs_own_reader_reads_and_says_so(job, tmp_path, monkeypatch):
    bin_dir = console_script(tmp_path / "bin", "axolotl", f'exec {sys.executable} "$@"')  # no axolotl
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    shutil.copy(LORA, tmp_path / "config.yml")
    reading = read_job(COMMAND, tmp_path)
    assert reading.values["micro_batch_size"] == 2 and reading.places["micro_batch_size"] == "argv:--micro-batch-size"
    [note] = [n for n in reading.notes if "could not be asked" in n]
    assert "axolotl is not importable here (No module named 'axolotl')" in note
    assert note.endswith("read by gpudoc's own reader")
