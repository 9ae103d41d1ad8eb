"""What `gpudoc run` reads of the job before launch, through the real CLI: a GPU tier (no [train])
with the command's knobs, the project profile from a subdirectory, and the one line a command from
which nothing could be read gets. Real scripts: the HF Trainer's own shape and a hand-written loop
with the same generic flags."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from gpudoc.allocator import CUDA_NAMES
from gpudoc.cli.estimate import EstimateCommand
from gpudoc.runs.store import RunStore
from tests.conftest import gpudoc_cli
from tests.estimate.hf_configs import CONFIGS
from tests.estimate.test_model_source import cache_model
from tests.job.scripts import ARGPARSE_LOOP, write_hf_script

JOBS = Path(__file__).with_name("jobs") / "frameworks"
GENERIC = ["--output_dir", "out", "--learning_rate", "3e-4", "--max_steps", "10", "--num_train_epochs", "1"]


def _dry_run(cwd: Path, *args: str) -> tuple[dict, str]:
    done = gpudoc_cli("run", "--dry-run", "--json", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_tier_with_a_command_reads_the_commands_knobs_and_sets_the_tiers_environment(isolated_home):
    write_hf_script(isolated_home)
    doc, err = _dry_run(isolated_home, "-p", "gpu-24gb", "--", "python", "train.py", "--per_device_train_batch_size",
                        "8", "--bf16")
    # The tier's allocator setting, under the name the job's torch reads.
    assert [doc["env_set"].get(name) for name in CUDA_NAMES if name in doc["env_set"]] == ["expandable_segments:True"]
    where = {b["knob"]: b["where"] for b in doc["bindings"]}
    assert where["micro_batch_size"] == "argv:--per_device_train_batch_size" and where["precision"] == "argv:--bf16"
    assert where["gradient_checkpointing"] == "default:hf-trainer"
    assert "read from the command (hf-trainer): micro_batch_size = 8" in err


def test_generic_flags_on_a_hand_written_loop_read_nothing_and_say_so(isolated_home):
    (isolated_home / "loop.py").write_text(ARGPARSE_LOOP)
    doc, err = _dry_run(isolated_home, "--", "python", "loop.py", *GENERIC)
    assert doc["bindings"] == []  # no "HF Trainer job" with the Trainer's defaults
    [line] = [line for line in err.splitlines() if "knob" in line]
    assert line.startswith("gpudoc: read no knob from the command") and "[bind]" in line and "probe" in line
    # The real HF script with the very same flags is the Trainer's: its defaults are the job's.
    write_hf_script(isolated_home)
    doc, err = _dry_run(isolated_home, "--", "python", "train.py", *GENERIC)
    assert {b["knob"]: b["where"] for b in doc["bindings"]}["micro_batch_size"] == "default:hf-trainer"
    assert "read no knob" not in err
    # A Trainer flag on the hand-written loop is read; what nothing settles is said to be unknown.
    doc, err = _dry_run(isolated_home, "--", "python", "loop.py", "--per_device_train_batch_size", "2", *GENERIC)
    assert [b["knob"] for b in doc["bindings"]] == ["micro_batch_size"]
    assert ("unknown: gradient_accumulation_steps, max_seq_len, precision, gradient_checkpointing"
            in err), err


def test_the_project_profile_answers_from_a_subdirectory(isolated_home):
    (isolated_home / "gpudoc.toml").write_text('[env]\nOMP_NUM_THREADS = "3"\n')
    sub = isolated_home / "jobs"
    sub.mkdir()
    write_hf_script(sub)
    doc, _ = _dry_run(sub, "--", "python", "train.py", "--per_device_train_batch_size", "2")
    assert doc["env_set"]["OMP_NUM_THREADS"] == "3"
    assert {b["knob"]: b["old"] for b in doc["bindings"]}["micro_batch_size"] == 2
    # A profile named from the project's .gpudoc/profiles, by the same upward search.
    (isolated_home / ".gpudoc" / "profiles").mkdir(parents=True)
    (isolated_home / ".gpudoc" / "profiles" / "box.toml").write_text('extends = "gpu-24gb"\n[env]\nOMP_NUM_THREADS = "5"\n')
    doc, _ = _dry_run(sub, "-p", "box", "--", "python", "train.py", "--per_device_train_batch_size", "2")
    assert doc["env_set"]["OMP_NUM_THREADS"] == "5" and "expandable_segments:True" in doc["env_set"].values()


def test_the_estimate_help_example_with_a_tier_reads_the_commands_knobs(isolated_home):
    [example] = [line for line in EstimateCommand.EXAMPLES.splitlines() if "-p gpu-24gb --" in line]
    args = shlex.split(example)[1:]
    hub = isolated_home / "hf" / "hub"
    cache_model(hub, "Qwen/Qwen2.5-7B", CONFIGS["Qwen/Qwen2.5-7B"])
    write_hf_script(isolated_home)
    args.insert(args.index("--"), "--json")
    done = gpudoc_cli(*args, cwd=isolated_home, env={"HF_HOME": str(hub.parent)})
    assert done.returncode in (0, 1), done.stderr  # an estimate: fits (0) or does not (1)
    doc = json.loads(done.stdout)
    assert doc["gpu_total_from"] == "[gpu] memory_gib" and doc["profile"] == "gpu-24gb"
    assert any("max_seq_len = 2048 (argv:--max_seq_length)" in note for note in doc["notes"])


@pytest.mark.slow
def test_retry_oom_under_a_tier_halves_the_flag_the_trainer_reads(isolated_home):
    for job in JOBS.glob("*.py"):
        shutil.copy(job, isolated_home / job.name)
    flags = ["--output_dir", "out", "--max_steps", "1", "--use_cpu", "--report_to", "none", "--save_strategy", "no",
             "--disable_tqdm", "True", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"]
    done = gpudoc_cli("run", "-p", "gpu-24gb", "--no-check", "--retry-oom", "3", "--", "python", "hf_trainer.py",
                      *flags, cwd=isolated_home, env={"OOM_ABOVE": "4", "OMP_NUM_THREADS": "1"}, timeout=300)
    assert "no rung of the ladder is left" not in done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    records = sorted(RunStore(isolated_home / ".gpudoc").records(), key=lambda r: r.started_at or "")
    last = records[-1]
    assert last.succeeded and last.profile_name == "gpu-24gb"
    assert last.knobs["micro_batch_size"] == 4 and last.knobs["gradient_accumulation_steps"] == 4
    assert "--per_device_train_batch_size" in last.argv and last.argv[last.argv.index(
        "--per_device_train_batch_size") + 1] == "4"


def test_fix_after_a_run_under_a_tier_writes_the_commands_flag_not_a_profile(isolated_home):
    from tests.commands.test_fix_arrival import FLAGS, HF_JOB

    (isolated_home / "train.py").write_text(HF_JOB)  # argparse with the Trainer's flags; OOM above 4
    done = gpudoc_cli("run", "-p", "gpu-24gb", "--no-check", "--", "python", "train.py", *FLAGS, cwd=isolated_home)
    assert done.returncode == 1, done.stderr
    fix = gpudoc_cli("fix", "--json", cwd=isolated_home)
    nxt = json.loads(fix.stdout)["next"]
    assert nxt["changes"]["micro_batch_size"] == [8, 4] and nxt["files"] == []  # no gpudoc.toml extending the tier
    assert nxt["argv"][nxt["argv"].index("--per_device_train_batch_size") + 1] == "4"


def test_uv_run_sets_the_allocator_name_the_environments_torch_reads(isolated_home):
    """The tier's allocator setting goes under the name the job's own torch reads: the project's
    environment behind `uv run` has torch, the python3 on PATH has none."""
    from tests.conftest import VENV_BIN

    write_hf_script(isolated_home)
    fake = isolated_home / "fakebin"
    fake.mkdir()
    (fake / "uv").write_text(f'#!/bin/sh\n[ "$1 $2" = "python find" ] && echo "{VENV_BIN}/python" && exit 0\nexit 2\n')
    (fake / "uv").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    command = ["-p", "gpu-24gb", "--dry-run", "--json", "--", "uv", "run", "python3", "train.py"]
    done = gpudoc_cli("run", *command, cwd=isolated_home, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["env_set"].get("PYTORCH_ALLOC_CONF") == "expandable_segments:True"
    # The environment not there yet (uv would create it): one note, and the python3 on PATH decides.
    (fake / "uv").write_text("#!/bin/sh\nexit 2\n")
    done = gpudoc_cli("run", *command, cwd=isolated_home, env=env)
    assert "gpudoc: note: uv run: `uv python find` named no interpreter (exit 2" in done.stderr
    assert "PYTORCH_ALLOC_CONF" not in json.loads(done.stdout)["env_set"]
