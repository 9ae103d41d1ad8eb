"""The real framework chains several test files read: one `gpudoc run --retry-oom` chain per
framework set-up, run once per test session (tests/conftest.py ``shared_once``) and read by every
test that asks about it — what gpudoc edited (test_run_frameworks.py) and what the probe observed
(test_observed_frameworks.py). A real framework's job costs seconds of CPU per process; the suite
runs each set-up once. Readers only: a test that changes what it finds works on a copy."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, VENV_BIN, gpudoc_cli, shared_once

FRAMEWORK_JOBS = Path(__file__).with_name("jobs") / "frameworks"
# LightningCLI's config for FRAMEWORK_JOBS' lightning_cli.py: the batch and the accumulation in the file.
LIGHTNING_CFG = """\
trainer:
  max_steps: 1
  accelerator: cpu
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
  accumulate_grad_batches: 2   # per optimizer step
data:
  batch_size: 8
"""


@dataclass(frozen=True)
class Chain:
    """A finished chain: gpudoc's status and stderr, its records (oldest first, as `runs show
    --json` gives them), its wall time, and the directory it ran in."""

    status: int
    said: str
    records: list[dict]
    seconds: float
    cwd: Path

    @property
    def first(self) -> dict:
        return self.records[0]

    @property
    def last(self) -> dict:
        return self.records[-1]

    def knobs(self, record: dict) -> dict:
        return {k: (v["value"], v["how"]) for k, v in (record["observed"] or {}).items() if k != "model"}


def chain(tmp_path_factory, name: str, files: dict[str, str | Path], command: list[str], *, retries: int = 2,
          env: dict | None = None) -> Chain:
    """Write the job's ``files`` (name -> its text, or the file or folder to copy), then run
    ``command`` under `gpudoc run --retry-oom`, once per session."""
    def make(where: Path) -> None:
        (where / "home").mkdir()
        for path, text in files.items():
            (where / path).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, str):
                (where / path).write_text(text)
            elif text.is_dir():
                shutil.copytree(text, where / path)
            else:
                shutil.copy(text, where / path)
        env_all = {"PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", os.defpath), "HOME": str(where / "home"),
                   "NO_COLOR": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        started = time.monotonic()
        done = gpudoc_cli("run", "--no-check", "--retry-oom", str(retries), "--", *command, cwd=where, env=env_all,
                          timeout=400)
        seconds = time.monotonic() - started
        runs = json.loads(gpudoc_cli("runs", "--json", cwd=where, env=env_all).stdout)["runs"]
        records = [json.loads(gpudoc_cli("runs", "show", r["id"], "--json", cwd=where, env=env_all).stdout)["run"]
                   for r in runs]
        (where / "chain.json").write_text(json.dumps({"status": done.returncode, "said": done.stderr,
                                                      "records": sorted(records, key=lambda r: r["id"]),
                                                      "seconds": seconds}))

    where = shared_once(tmp_path_factory, f"chain-{name}", make)
    found = json.loads((where / "chain.json").read_text())
    return Chain(found["status"], found["said"], found["records"], found["seconds"], where)


def torchtune_path() -> str:
    """torchtune's jobs import a torchao that peft refuses: bin/test keeps it in a directory of its own."""
    torchao = Path(VENV_BIN).parent / "torchtune-torchao"
    assert (torchao / "torchao").is_dir(), f"{torchao}: missing; ./bin/test installs it (torchao for torchtune)"
    return os.pathsep.join([str(REPO), str(torchao)])


# torchtune through its own `tune run`: the micro batch an override on the command line (16, over the
# config file's 8), the accumulation in the config file (a comment beside it that an edit must
# keep); batch_size, dtype and tokenizer make the file one gpudoc knows as torchtune's.
TORCHTUNE_CFG = ("batch_size: 8\ngradient_accumulation_steps: 2  # per optimizer step\ndtype: fp32\n"
                 "tokenizer:\n  max_seq_len: 16\n")
TORCHTUNE_COMMAND = ["tune", "run", "torchtune_recipe.py", "--config", "cfg.yaml", "batch_size=16"]


def torchtune(tmp_path_factory) -> Chain:
    """The torchtune recipe (one process) over-running at a micro batch above 4: two halvings, the
    second below the value the config file holds."""
    return chain(tmp_path_factory, "torchtune", {
        "torchtune_recipe.py": FRAMEWORK_JOBS / "torchtune_recipe.py", "oom.py": FRAMEWORK_JOBS / "oom.py",
        "cfg.yaml": TORCHTUNE_CFG}, TORCHTUNE_COMMAND, retries=3,
        env={"OOM_ABOVE": "4", "PYTHONPATH": torchtune_path()})
