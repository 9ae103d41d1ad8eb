"""`gpudoc run` as a user drives it: dry runs, the pre-flight gate, bindings, retries, tmux."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, gpudoc_cli, tmux_screen
from tests.launch.helpers import last_record, run_dirs

JOBS = Path(__file__).resolve().parent / "jobs"

PROFILE = """\
[env]
PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"

[train]
micro_batch_size = 8
gradient_accumulation_steps = 4

[bind.files."ds_config.json"]
micro_batch_size = "train_micro_batch_size_per_gpu"
"""

DS_CONFIG = '{\n  "train_micro_batch_size_per_gpu": 1,\n  "gradient_accumulation_steps": "auto"\n}\n'


def test_dry_run_json_shows_everything_and_changes_nothing(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    (isolated_home / "ds_config.json").write_text(DS_CONFIG)
    done = gpudoc_cli("run", "--dry-run", "--json", "--", "python", "train.py", "--bs", "{micro_batch_size}")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["command"] == "run" and doc["dry_run"] is True and doc["schema_version"] == 1
    assert doc["argv"] == ["python", "train.py", "--bs", "8"]
    # torch 2.13 reads PYTORCH_ALLOC_CONF: the profile's old spelling is written under that name.
    assert doc["env_set"]["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in doc["env_set"]
    assert doc["env_set"]["GPUDOC_MICRO_BATCH_SIZE"] == "8"
    assert doc["env_set"]["GPUDOC_GRADIENT_ACCUMULATION_STEPS"] == "4"
    [edit] = doc["file_edits"]
    assert edit["path"].endswith("ds_config.json")
    assert '-  "train_micro_batch_size_per_gpu": 1,' in edit["diff"]
    assert '+  "train_micro_batch_size_per_gpu": 8,' in edit["diff"]
    assert (isolated_home / "ds_config.json").read_text() == DS_CONFIG
    assert not run_dirs(isolated_home)


def test_dry_run_with_no_profile_lists_the_knobs_read_from_the_job_where_they_live(isolated_home):
    (isolated_home / "cfg.yaml").write_text("batch_size: 8\ngradient_accumulation_steps: 2\n")
    command = ["tune", "run", "recipe.py", "--config", "cfg.yaml", "batch_size=16"]
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *command)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["argv"] == command and doc["file_edits"] == []
    assert sorted(doc["bindings"], key=lambda b: b["knob"]) == [
        {"knob": "gradient_accumulation_steps", "file": "cfg.yaml", "key": "gradient_accumulation_steps",
         "old": 2, "new": 2, "added": False, "where": "file:cfg.yaml:gradient_accumulation_steps"},
        {"knob": "micro_batch_size", "file": "command", "key": "batch_size", "old": 16, "new": 16, "added": False,
         "where": "argv:batch_size"}]
    text = gpudoc_cli("run", "--dry-run", "--", *command)
    assert text.returncode == 0, text.stderr
    shown = text.stdout.split("bindings:\n", 1)[1].split("(dry run", 1)[0]
    assert sorted(shown.splitlines()) == [
        "  gradient_accumulation_steps -> cfg.yaml:gradient_accumulation_steps  = 2 (unchanged)",
        "  micro_batch_size -> command batch_size  = 16 (unchanged)"]
    assert (isolated_home / "cfg.yaml").read_text() == "batch_size: 8\ngradient_accumulation_steps: 2\n"
    assert not run_dirs(isolated_home)


def test_dry_run_with_no_profile_lists_a_framework_default_as_having_no_place_yet(isolated_home):
    command = ["python", "main.py", "fit", "--data.batch_size", "4"]
    doc = json.loads(gpudoc_cli("run", "--dry-run", "--json", "--", *command).stdout)
    assert {"knob": "precision", "file": None, "key": None, "old": "fp32", "new": "fp32", "added": False,
            "where": "default:lightning"} in doc["bindings"]
    text = gpudoc_cli("run", "--dry-run", "--", *command).stdout
    assert '  precision -> default:lightning  = "fp32" (unchanged)\n' in text


def test_run_applies_env_placeholders_and_file_edits_and_records_them(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    (isolated_home / "ds_config.json").write_text(DS_CONFIG)
    code = ("import os, sys, json; print(sys.argv[1], os.environ['GPUDOC_MICRO_BATCH_SIZE'], "
            "os.environ['PYTORCH_ALLOC_CONF'], json.load(open('ds_config.json'))['train_micro_batch_size_per_gpu'])")
    done = gpudoc_cli("run", "--no-check", "--", "python", "-c", code, "{micro_batch_size}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "8 8 expandable_segments:True 8\n"
    record = last_record(isolated_home)
    assert record["command"][-1] == "{micro_batch_size}"  # as typed: a rerun binds again
    assert record["argv"][-1] == "8"
    assert record["env_set"]["GPUDOC_MICRO_BATCH_SIZE"] == "8"
    assert record["profile"]["knobs"]["micro_batch_size"] == 8
    [edit] = record["file_edits"]
    assert edit["path"].endswith("ds_config.json") and Path(edit["backup"]).read_text() == DS_CONFIG


def test_forgotten_double_dash_keeps_the_jobs_flags_for_the_job(isolated_home):
    done = gpudoc_cli("run", "--no-check", "python", "-c", "import sys; print(sys.argv[1:])", "--lr", "3", "-p", "x")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['--lr', '3', '-p', 'x']\n"


def test_failed_preflight_refuses_with_125_and_force_launches(isolated_home):
    # This machine has no NVIDIA driver: the driver check fails, so the gate refuses.
    done = gpudoc_cli("run", "--", "python", "-c", "print('launched')")
    assert done.returncode == 125
    assert "launched" not in done.stdout
    assert "driver.nvml" in done.stderr and "--force" in done.stderr
    assert not run_dirs(isolated_home)
    forced = gpudoc_cli("run", "--force", "--", "python", "-c", "print('launched')")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == "launched\n"


def test_gpudoc_own_errors_are_125(isolated_home):
    assert gpudoc_cli("run", "--bogus-switch", "--", "true").returncode == 125
    bad = gpudoc_cli("run", "-p", "no-such-profile", "--no-check", "--", "true")
    assert bad.returncode == 125 and "no-such-profile" in bad.stderr
    assert gpudoc_cli("run", "--no-check").returncode == 125  # nothing to run


def test_retry_oom_walks_the_ladder_until_it_fits(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(
        "[train]\nmicro_batch_size = 8\ngradient_accumulation_steps = 1\n")
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "4", "--", "python", str(JOBS / "fits.py"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("fits")
    records = [json.loads((d / "run.json").read_text()) for d in run_dirs(isolated_home)]
    assert len(records) >= 2
    assert [r["cause"] for r in records[:-1]] == ["gpu_oom"] * (len(records) - 1)
    assert records[-1]["status"] == "ok"
    for previous, attempt in zip(records, records[1:]):
        assert attempt["parent"] == previous["id"]
    assert records[-1]["profile"]["knobs"]["micro_batch_size"] <= 2
    # The global batch is kept: the ladder raised gradient accumulation as it halved.
    knobs = records[-1]["profile"]["knobs"]
    assert knobs["micro_batch_size"] * knobs["gradient_accumulation_steps"] == 8
    assert "retry-oom" in done.stderr
    assert "micro_batch_size = " + str(knobs["micro_batch_size"]) in (isolated_home / "gpudoc.toml").read_text()


def test_retry_oom_stops_at_n(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[train]\nmicro_batch_size = 64\ngradient_accumulation_steps = 1\n")
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "1", "--", "python", str(JOBS / "fits.py"))
    assert done.returncode == 1
    assert len(run_dirs(isolated_home)) == 2


def test_tmux_starts_the_same_run_detached(isolated_home, tmux_env):
    done = gpudoc_cli("run", "--tmux", "train1", "--no-check", "--", "python", "-c", "print('inside tmux')",
                      env={**tmux_env, "GPUDOC_TEST_MARK": "carried"})
    assert done.returncode == 0, done.stderr
    assert "tmux attach -t train1" in done.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        dirs = run_dirs(isolated_home)
        if dirs and json.loads((dirs[-1] / "run.json").read_text())["status"] != "running":
            break
        time.sleep(0.1)
    record = last_record(isolated_home)
    assert record["status"] == "ok", record
    assert (run_dirs(isolated_home)[-1] / "output.log").read_bytes() == b"inside tmux\n"
    again = gpudoc_cli("run", "--tmux", "train1", "--no-check", "--", "true", env=tmux_env)
    # The session ended with the job: a second one of that name starts fine.
    assert again.returncode == 0, again.stderr


def test_a_failed_run_keeps_its_tmux_window_with_the_summary_until_enter(isolated_home, tmux_env):
    env = {**os.environ, **tmux_env}
    done = gpudoc_cli("run", "--tmux", "broken", "--no-check", "--", "python", "-c",
                      "raise SystemExit('the dataset is missing')", env=tmux_env)
    assert done.returncode == 0, done.stderr
    screen = tmux_screen(env, "=broken:", until="press Enter to close", timeout=30)
    assert "the dataset is missing" in screen and "FAILED" in screen, screen
    assert "the run ended with exit status 1" in screen
    subprocess.run(["tmux", "send-keys", "-t", "=broken:", "Enter"], env=env, check=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and subprocess.run(
            ["tmux", "has-session", "-t", "=broken"], env=env, capture_output=True).returncode == 0:
        time.sleep(0.1)
    assert subprocess.run(["tmux", "has-session", "-t", "=broken"], env=env, capture_output=True).returncode != 0


def test_tmux_keep_always_keeps_a_successful_window_too(isolated_home, tmux_env):
    env = {**os.environ, **tmux_env}
    (isolated_home / "gpudoc.toml").write_text('[run]\ntmux_keep = "always"\n')
    assert gpudoc_cli("run", "--tmux", "fine", "--no-check", "--", "python", "-c", "print('ok')",
                      env=tmux_env).returncode == 0
    screen = tmux_screen(env, "=fine:", until="press Enter to close", timeout=30)
    assert "the run ended with exit status 0" in screen
    (isolated_home / "gpudoc.toml").write_text('[run]\ntmux_keep = "sometimes"\n')
    refused = gpudoc_cli("run", "--tmux", "odd", "--no-check", "--", "true", env=tmux_env)
    assert refused.returncode == 125 and "tmux_keep" in refused.stderr


def test_tmux_refuses_an_existing_session(isolated_home, tmux_env):
    env = {**os.environ, **tmux_env}
    subprocess.run(["tmux", "new-session", "-d", "-s", "busy", "sleep", "30"], env=env, check=True)
    done = gpudoc_cli("run", "--tmux", "busy", "--no-check", "--", "true", env=tmux_env)
    assert done.returncode == 125
    assert "already exists" in done.stderr


def test_a_dry_run_with_tmux_starts_no_session_and_names_are_checked(isolated_home, tmux_env):
    env = {**os.environ, **tmux_env}
    done = gpudoc_cli("run", "--dry-run", "--tmux", "plan", "--no-check", "--", "python", "-c", "print(1)",
                      env=tmux_env)
    assert done.returncode == 0, done.stderr
    assert "started in tmux" not in done.stderr
    assert subprocess.run(["tmux", "has-session", "-t", "=plan"], env=env, capture_output=True).returncode != 0
    for name in ("a\x01b", "a.b", "-x"):
        refused = gpudoc_cli("run", "--dry-run", "--tmux", name, "--no-check", "--", "true", env=tmux_env)
        assert refused.returncode == 125 and "is not a usable tmux session name" in refused.stderr
        assert "\x01" not in refused.stderr  # shown as an escape, never sent to the terminal


def test_tmux_missing_is_a_clear_refusal(isolated_home, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python")
    done = gpudoc_cli("run", "--tmux", "x", "--no-check", "--", "true", env={"PATH": str(bindir)})
    assert done.returncode == 125
    assert "tmux is not installed" in done.stderr


def test_clean_before_launch_reads_gpu_processes_and_leaves_others_alone(isolated_home):
    # NVML is the one thing faked: the real tesla-t4 capture, whose processes are not this
    # user's (another machine's PIDs). --clean must look, touch nothing, and launch.
    code = """
import io, sys
from gpudoc.commands.run import RunOptions, run
from gpudoc.output import Console
from gpudoc.workspace import Workspace
from tests.facts.fake_nvml import FakeNvml
from tests.conftest import NVIDIA_SMI
backend = FakeNvml.from_snapshot(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml")
err = io.StringIO()
status = run(RunOptions(command=[sys.executable, "-c", "print('launched')"], no_check=True, clean=True, yes=True),
             Workspace(console=Console(out=sys.stdout, err=err), nvml_backend=backend))
sys.stdout.flush()
print("STATUS", status)
print(err.getvalue())
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=isolated_home, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "STATUS 0" in done.stdout, done.stdout + done.stderr
    assert done.stdout.startswith("launched\n")
    assert "Nothing of yours holds memory on GPU 0." in done.stdout
    assert done.stdout.count("not touched: GPU 0: PID") == 2  # the capture's two processes


def test_the_gate_weighs_the_memory_estimate_like_gpudoc_check(isolated_home):
    # A 7B full fine-tune cannot fit the real T4 capture's 15 GiB card: the gate must refuse
    # on the estimate even though [gpu] min_free_gib alone is met.
    (isolated_home / "gpudoc.toml").write_text(
        "[gpu]\nmin_free_gib = 1\n[train]\nmicro_batch_size = 1\nmax_seq_len = 512\nprecision = \"bf16\"\n"
        "[model]\nparams = 6.7e9\nlayers = 32\nhidden = 4096\nheads = 32\nffn = 11008\nvocab = 32000\n")
    code = """
import io, sys
from gpudoc.commands.run import RunOptions, run
from gpudoc.errors import GpudocError
from gpudoc.output import Console
from gpudoc.workspace import Workspace
from tests.facts.fake_nvml import FakeNvml
from tests.conftest import NVIDIA_SMI
backend = FakeNvml.from_snapshot(NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml")
err = io.StringIO()
try:
    run(RunOptions(command=[sys.executable, "-c", "print('launched')"]),
        Workspace(console=Console(out=sys.stdout, err=err), nvml_backend=backend))
except GpudocError as exc:
    print("REFUSED", exc.exit_status, exc)
print(err.getvalue())
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=isolated_home, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "REFUSED 125" in done.stdout, done.stdout + done.stderr
    assert "launched" not in done.stdout
    assert "gpu.free-memory" in done.stdout
    assert "gpudoc estimate" in done.stdout  # the figure's source is named
