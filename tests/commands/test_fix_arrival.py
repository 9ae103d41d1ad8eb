"""`gpudoc fix` on a job read from its command (no profile): the relaunch's change is checked
against what the job printed, `--apply` says what it gives and writes once, and the next command
keeps the run's own switches."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from gpudoc.runs.store import RunStore
from tests.conftest import gpudoc_cli

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and "
       "341.25 MiB is reserved by PyTorch but unallocated.\n")
# The Trainer's flags and banner; with IGNORE_FLAG=1 the script hard-codes its batch, as seed users'
# scripts do. It fits at 4 samples a step.
HF_JOB = f"""\
import argparse, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--output_dir")
parser.add_argument("--per_device_train_batch_size", type=int, default=8)
parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
parser.add_argument("--gradient_checkpointing", action="store_true")  # a flag gpudoc may add: declared here
args = parser.parse_args()
bs = 8 if os.environ.get("IGNORE_FLAG") == "1" else args.per_device_train_batch_size
print("***** Running training *****")
print(f"  Instantaneous batch size per device = {{bs}}")
print(f"  Gradient Accumulation steps = {{args.gradient_accumulation_steps}}", flush=True)
if bs > 4:
    sys.stderr.write({OOM!r})
    sys.exit(1)
print("step 0 loss 2.5")
"""
FLAGS = ["--output_dir", "out", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"]
NANOGPT = Path(__file__).with_name("jobs") / "nanogpt_config.py"


def _failed_hf_run(cwd: Path, **env: str) -> None:
    (cwd / "train.py").write_text(HF_JOB)
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", *FLAGS, cwd=cwd, env=env)
    assert done.returncode == 1, done.stderr


def _records(cwd: Path) -> list:
    return sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")


def _halvings(body: dict) -> list:
    return [s["rung"] for s in body["suggestions"] if "micro_batch_size" in s["changes"]]


def test_rerun_says_a_flag_the_job_ignored_and_later_fixes_propose_no_further_rung_of_it(tmp_path):
    _failed_hf_run(tmp_path, IGNORE_FLAG="1")
    done = gpudoc_cli("fix", "--rerun", cwd=tmp_path, env={"IGNORE_FLAG": "1"})
    assert done.returncode == 1
    first, child = _records(tmp_path)
    assert child.parent == first.id and child.knobs["micro_batch_size"] == 4
    assert child.arrival == {"missing": {"micro_batch_size": "the job printed micro_batch_size = 8 again, not 4"},
                             "confirmed": ["gradient_accumulation_steps"],
                             # The job never imports torch: its probe saw nothing, its print decided.
                             "source": {"micro_batch_size": "echo", "gradient_accumulation_steps": "echo"}}
    assert ("gpudoc: micro_batch_size = 4 did not reach the job: the job printed micro_batch_size = 8 again, not 4; "
            "gpudoc wrote it to argv:--per_device_train_batch_size and the job did not use it") in done.stderr
    assert "gpudoc: the ladder stops at micro_batch_size: " in done.stderr

    body = json.loads(gpudoc_cli("fix", "--json", cwd=tmp_path).stdout)
    assert _halvings(body) == []  # 4 -> 2 would not reach the job either
    assert body["notes"][0].startswith(f"micro_batch_size did not reach the job in run {child.id} (the job printed "
                                       "micro_batch_size = 8 again, not 4): no rung of it is proposed until")
    assert "argv:--per_device_train_batch_size" in body["notes"][0]
    # Another knob's rung, relaunched: the batch still holds the value the job never saw, so it
    # stays held back after that run too.
    assert body["suggestions"][0]["rung"] == "gradient-checkpointing"
    gpudoc_cli("fix", "--rerun", cwd=tmp_path, env={"IGNORE_FLAG": "1"})
    third = _records(tmp_path)[-1]
    assert third.parent == child.id and third.knobs["micro_batch_size"] == 4
    assert _halvings(json.loads(gpudoc_cli("fix", "--json", cwd=tmp_path).stdout)) == []


def test_rerun_of_a_flag_the_job_reads_is_confirmed_silently(tmp_path):
    _failed_hf_run(tmp_path)
    done = gpudoc_cli("fix", "--rerun", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    child = _records(tmp_path)[-1]
    assert child.arrival == {"missing": {}, "confirmed": ["micro_batch_size", "gradient_accumulation_steps"],
                             "source": {"micro_batch_size": "echo", "gradient_accumulation_steps": "echo"}}
    assert "did not reach" not in done.stderr and "ladder stops" not in done.stderr


def test_apply_gives_the_next_command_with_the_runs_own_switches(tmp_path):
    _failed_hf_run(tmp_path)
    [failed] = _records(tmp_path)
    body = json.loads(gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path).stdout)
    run_next = [n for n in body["notes"] if n.startswith("run next: ")]
    assert run_next == [
        f"run next: PYTORCH_ALLOC_CONF=expandable_segments:True gpudoc run --no-check -- {sys.executable} train.py "
        "--output_dir out --per_device_train_batch_size 4 --gradient_accumulation_steps 4  "
        f"(or `gpudoc fix --rerun {failed.id}`)"]


def test_apply_of_flags_says_there_is_nothing_to_write_each_time(tmp_path):
    _failed_hf_run(tmp_path)
    for _ in range(2):
        said = gpudoc_cli("fix", "--apply", cwd=tmp_path).stdout
        assert "Applied" not in said
        assert "Nothing to write for expandable-segments+halve-micro-batch: the next command, below, carries it." in said
    assert (tmp_path / "train.py").read_text() == HF_JOB


def test_a_second_apply_of_a_config_file_rung_writes_nothing_and_says_it_is_not_yet_tried(tmp_path):
    shutil.copy(NANOGPT, tmp_path / "train.py")
    (tmp_path / "cfg.py").write_text("batch_size = 32\n")
    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", "cfg.py", cwd=tmp_path).returncode == 1
    [failed] = _records(tmp_path)
    first = gpudoc_cli("fix", "--apply", cwd=tmp_path)
    assert f"Applied expandable-segments+halve-micro-batch to {tmp_path / 'cfg.py'}." in first.stdout
    assert (tmp_path / "cfg.py").read_text() == "batch_size = 16\n"
    second = gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    body = json.loads(second.stdout)
    assert body["applied"] is None
    assert (f"nothing written: expandable-segments+halve-micro-batch is already in {tmp_path / 'cfg.py'} and not "
            f"yet tried; `gpudoc fix --rerun {failed.id}` launches it") in body["notes"]
    assert (tmp_path / "cfg.py").read_text() == "batch_size = 16\n"  # not halved twice
    assert "Applied" not in gpudoc_cli("fix", "--apply", cwd=tmp_path).stdout
    assert len(RunStore(tmp_path / ".gpudoc").load(failed.id).applied_edits) == 1
