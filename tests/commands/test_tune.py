"""`gpudoc tune` on real jobs: the seed guides' hand-written loop under real torchrun (1 and 2
processes), running out of memory above a budget (``--oom-above``: a real torch.OutOfMemoryError), its
knobs bound by a profile. Each tune runs once per session (tests/conftest.py shared_once) and several
tests read it; the refusals and the trial's command line on their own."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from gpudoc.commands.tune import PROBE_STOP, Stop, apply_answer, trial_command
from gpudoc.frameworks import hf_trainer, litgpt, nanogpt
from gpudoc.profiles.from_job import with_command
from gpudoc.results.tune import FITS, Trial
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from tests.commands.chains import LIGHTNING_CFG
from tests.conftest import captured_workspace, gpudoc_cli, shared_once
from tests.render.test_envelope_contract import assert_envelope

JOB = Path(__file__).resolve().parents[1] / "probe" / "jobs" / "custom_loop.py"
FRAMEWORKS = Path(__file__).with_name("jobs") / "frameworks"
PROFILE = """[run]
oom_grace_s = 0

[train]
micro_batch_size = 4
gradient_accumulation_steps = 3

[bind.flags]
micro_batch_size = "--batch"
gradient_accumulation_steps = "--accum"
"""


def _files(project: Path) -> dict[str, str]:
    """Every file of the project but gpudoc's own run store, by its content's hash."""
    return {str(p.relative_to(project)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(project.rglob("*")) if p.is_file() and ".gpudoc" not in p.parts}


def _tune(tmp_path_factory, nproc: int, *switches: str) -> dict:
    """A project (the job as train.py, its profile), its files before and after `gpudoc tune`, the
    answer and the trials' records."""
    def make(where: Path) -> None:
        project = where / "project"
        project.mkdir()
        shutil.copy(JOB, project / "train.py")
        (project / "gpudoc.toml").write_text(PROFILE)
        before = _files(project)
        done = gpudoc_cli("tune", "-p", "gpudoc.toml", *switches, "--json", "--", "torchrun", "--nproc_per_node",
                          str(nproc), "--monitor-interval=0.1", "train.py", "--oom-above", "40", "--steps", "100", cwd=project,
                          env={"OMP_NUM_THREADS": "1"}, timeout=600)
        (where / "done.json").write_text(json.dumps({"rc": done.returncode, "stdout": done.stdout,
                                                     "stderr": done.stderr, "before": before,
                                                     "after": _files(project)}))

    where = shared_once(tmp_path_factory, f"tune-{nproc}", make)
    done = json.loads((where / "done.json").read_text())
    assert done["rc"] in (0, 1), done["stderr"][-3000:]
    done["doc"] = json.loads(done["stdout"])
    store = RunStore(where / "project" / ".gpudoc")
    done["records"] = {r.id: r for r in store.records()}
    done["project"] = where / "project"
    return done


@pytest.fixture
def one(tmp_path_factory, isolated_home):
    """One process, nothing applied: the job's own micro batch 4 is above --max 3, so 3 is tried first."""
    return _tune(tmp_path_factory, 1, "--min", "2", "--max", "3")


@pytest.fixture
def two(tmp_path_factory, isolated_home):
    """Two processes, --apply: one trial (--min 2 --max 2) and the profile written."""
    return _tune(tmp_path_factory, 2, "--min", "2", "--max", "2", "--apply")


@pytest.mark.slow
def test_the_largest_micro_batch_that_fits_is_found_within_the_bound(one):
    doc = one["doc"]
    assert_envelope(doc, "tune", one["rc"])
    assert list(doc)[5:] == ["tune_id", "global_batch_size", "world_size", "best", "trials", "skipped",
                             "launch_bound", "capacity_bytes", "applied", "notes"]
    assert one["rc"] == 0 and doc["status"] == "ok"
    assert doc["global_batch_size"] == 12 and doc["world_size"] == 1
    # 3 runs out of memory above 40 tokens (16 a sample) from the second step on, 2 fits.
    assert [(t["micro_batch_size"], t["gradient_accumulation_steps"], t["outcome"]) for t in doc["trials"]] == [
        (3, 4, "oom"), (2, 6, "fits")]
    assert doc["launch_bound"] == 2  # ceil(log2(2 micro batches)) + 1
    best = doc["best"]
    assert (best["micro_batch_size"], best["gradient_accumulation_steps"]) == (2, 6)
    assert best["seconds_per_step"] > 0 and best["run_id"] == doc["trials"][1]["run_id"]
    assert best["peak_bytes"] is None and best["headroom_bytes"] is None  # CPU: no card to measure
    assert doc["applied"] is None


@pytest.mark.slow
def test_each_trial_is_a_record_of_its_own_with_the_global_batch_exact(one, two):
    for tuned, world in ((one, 1), (two, 2)):
        doc = tuned["doc"]
        for trial in doc["trials"]:
            record = tuned["records"][trial["run_id"]]
            assert record.trial_of == doc["tune_id"]
            observed = record.observed
            # What the probe saw each rank train with: micro x accumulation x world = the job's own 4 x 3 x world.
            assert observed["micro_batch_size"]["value"] == trial["micro_batch_size"]
            assert observed["world_size"]["value"] == world
            if trial["outcome"] == "fits":
                assert observed["gradient_accumulation_steps"]["value"] == trial["gradient_accumulation_steps"]
                assert record.steps["count"] == 3  # the probe stopped the job (its own limit is 100 steps)
                assert record.status == "ok" and record.exit_code == 0
            assert trial["micro_batch_size"] * trial["gradient_accumulation_steps"] * world == 12 * world


@pytest.mark.slow
def test_no_project_file_changes_before_apply_and_apply_writes_the_profile(one, two):
    assert one["after"] == one["before"]  # the job's progress file went to the trial's own directories
    trial = one["records"][one["doc"]["trials"][1]["run_id"]]
    [output] = [a.removeprefix("--output_dir=") for a in trial.argv if a.startswith("--output_dir=")]
    assert not output.startswith(str(one["project"])) and trial.cwd != str(one["project"])
    assert two["rc"] == 0 and two["doc"]["applied"]["rung"] == "tune-micro-batch"
    changed = {name for name in two["after"] if two["after"][name] != two["before"].get(name)}
    assert changed == {"gpudoc.toml", "gpudoc.toml.gpudoc.bak"}
    text = (two["project"] / "gpudoc.toml").read_text()
    assert "micro_batch_size = 2\ngradient_accumulation_steps = 6\n" in text and "[bind.flags]" in text


def test_a_job_whose_micro_batch_is_unknown_is_refused_in_one_line(isolated_home):
    shutil.copy(JOB, isolated_home / "train.py")
    done = gpudoc_cli("tune", "--json", "--", "python", "train.py", cwd=isolated_home)
    assert done.returncode == 125
    assert_envelope(json.loads(done.stdout), "tune", 125)
    assert done.stderr.startswith("gpudoc: the job's micro batch is unknown (the command does not say it)")
    assert len(done.stderr.splitlines()) == 1
    assert not (isolated_home / ".gpudoc" / "runs").exists() or not any((isolated_home / ".gpudoc" / "runs").iterdir())


def test_a_job_no_trial_could_stop_is_refused(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    done = gpudoc_cli("tune", "--", "python", "-I", str(JOB), cwd=isolated_home)
    assert done.returncode == 125
    assert "the job has no step limit gpudoc knows and the probe cannot watch it" in done.stderr


def test_a_trial_sets_the_frameworks_step_limit_and_only_the_switches_its_parser_takes():
    hf = trial_command(["torchrun", "--nproc_per_node", "2", "train.py", "--max_steps", "1000",
                        "--eval_strategy", "steps", "--output_dir", "runs/a"], Stop.of(hf_trainer), 3, "/tmp/o", set())
    assert hf[:4] == ["torchrun", "--nproc_per_node", "2", "train.py"]
    assert hf[4:] == ["--max_steps", "3", "--eval_strategy", "no", "--output_dir", "/tmp/o",
                      "--save_strategy=no", "--report_to=none"]
    assert "--evaluation_strategy=no" not in hf and "--push_to_hub=False" not in hf  # not given, not declared
    nano = trial_command(["python", "train.py", "config/x.py"], Stop.of(nanogpt), 5, "/tmp/o", set())
    assert nano == ["python", "train.py", "config/x.py", "--max_iters=5", "--always_save_checkpoint=False",
                    "--wandb_log=False", "--out_dir=/tmp/o"]
    # A framework with a step limit of its own but no switches gpudoc knows: its limit, and only the
    # declared switches (LitGPT's adapter sets --train.max_steps).
    lit = trial_command(["litgpt", "finetune", "--config", "c.yaml"], Stop.of(litgpt), 3,
                        "/tmp/o", set())
    assert lit == ["litgpt", "finetune", "--config", "c.yaml", "--train.max_steps", "3"]
    # No step limit of its own: the probe stops it; only the switches its parser declares are given.
    own = trial_command(["python", "loop.py", "--batch", "4"], PROBE_STOP, 3, "/tmp/o", {"--output_dir", "--batch"})
    assert own == ["python", "loop.py", "--batch", "4", "--output_dir=/tmp/o"]
    assert trial_command(["python", "loop.py"], PROBE_STOP, 3, "/tmp/o", set()) == ["python", "loop.py"]


def test_apply_for_a_job_read_from_its_command_hands_back_the_next_command_line(isolated_home):
    # The HF Trainer's flags on the command line: nothing to write, the next command is the answer,
    # planned by the one relaunch owner on the user's own command (never the trial's, with its limit).
    command = ["torchrun", "--nproc_per_node", "2", "train.py", "--per_device_train_batch_size", "8",
               "--gradient_accumulation_steps", "2", "--output_dir", "out"]
    ws = captured_workspace(isolated_home)
    profile = with_command(ws.load_profile(None), command, ws.cwd, ws.environ)
    trial = RunRecord(id="20260101-000000000-aaaaaa", command=[*command, "--max_steps=3"], cwd="/tmp/gone",
                      run_switches=["--no-check"], trial_of="20260101-000000000-bbbbbb")
    written, said = apply_answer(Trial(4, 4, FITS, trial.id), 8, 2, profile, command, {trial.id: trial}, ws)
    assert written is not None and written["rung"] == "tune-micro-batch" and written["files"] == []
    assert written["command"] == [*command[:5], "4", "--gradient_accumulation_steps", "4", "--output_dir", "out"]
    assert said == ["run next: gpudoc run -- torchrun --nproc_per_node 2 train.py --per_device_train_batch_size 4 "
                    "--gradient_accumulation_steps 4 --output_dir out"]
    assert sorted(p.name for p in isolated_home.iterdir()) == []  # nothing written
    assert apply_answer(Trial(8, 2, FITS, trial.id), 8, 2, profile, command, {trial.id: trial}, ws) == (
        None, ["nothing written: the job already runs micro batch 8 x accumulation 2"])


@pytest.mark.slow
def test_an_hf_trainer_trial_stops_at_its_max_steps_with_saving_and_trackers_off(isolated_home):
    # It asks for 100 steps, a checkpoint at every step into out/ and the default trackers; one trial
    # (--min 4 --max 4) runs 3 steps, saves nothing, and leaves the project as it was.
    for job in ("hf_trainer.py", "oom.py"):
        shutil.copy(FRAMEWORKS / job, isolated_home / job)
    before = _files(isolated_home)
    done = gpudoc_cli("tune", "--min", "4", "--max", "4", "--json", "--", "python", "hf_trainer.py", "--output_dir",
                      "out", "--max_steps", "100", "--save_strategy", "steps", "--save_steps", "1", "--use_cpu",
                      "--disable_tqdm", "True", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps",
                      "2", cwd=isolated_home, timeout=300,
                      # Bytecode caches on, as on most machines: the job's own modules must not leave theirs here.
                      env={"OOM_ABOVE": "4", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": ""})
    doc = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (doc["best"]["micro_batch_size"], doc["best"]["gradient_accumulation_steps"]) == (4, 4)
    [record] = RunStore(isolated_home / ".gpudoc").records()
    assert record.steps["count"] == 3 and record.status == "ok"
    argv = record.argv
    assert argv[argv.index("--max_steps") + 1] == "3" and argv[argv.index("--save_strategy") + 1] == "no"
    assert "--report_to=none" in argv and argv[argv.index("--per_device_train_batch_size") + 1] == "4"
    assert _files(isolated_home) == before and not (isolated_home / "out").exists()


@pytest.mark.slow
def test_a_lightning_trial_edits_a_copy_of_its_config_and_apply_writes_the_users(isolated_home):
    # LightningCLI's batch and accumulation live in cfg.yaml: each trial edits a copy of its own in its
    # working directory; the project's file changes only with --apply, as fix --apply writes a rung.
    for job in ("lightning_cli.py", "oom.py"):
        shutil.copy(FRAMEWORKS / job, isolated_home / job)
    config = LIGHTNING_CFG.replace("max_steps: 1", "max_steps: 100")
    (isolated_home / "cfg.yaml").write_text(config)
    done = gpudoc_cli("tune", "--min", "4", "--max", "8", "--apply", "--json", "--", "python", "lightning_cli.py",
                      "fit", "--config", "cfg.yaml", cwd=isolated_home, env={"OOM_ABOVE": "4", "OMP_NUM_THREADS": "1"},
                      timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert [(t["micro_batch_size"], t["outcome"]) for t in doc["trials"]] == [(8, "oom"), (4, "fits")]
    assert (doc["best"]["micro_batch_size"], doc["best"]["gradient_accumulation_steps"]) == (4, 4)
    records = {r.id: r for r in RunStore(isolated_home / ".gpudoc").records()}
    fitted = records[doc["best"]["run_id"]]
    argv = fitted.argv
    assert fitted.steps["count"] == 3 and argv[argv.index("--trainer.max_steps") + 1] == "3"  # Lightning's own limit
    [edit] = fitted.file_edits  # the trial's own copy, in a working directory that is gone
    assert not Path(edit["path"]).is_relative_to(isolated_home) and not Path(edit["path"]).exists()
    # --apply wrote the user's file, its first backup kept.
    text = (isolated_home / "cfg.yaml").read_text()
    assert "  batch_size: 4\n" in text and "  accumulate_grad_batches: 4   # per optimizer step\n" in text
    assert (isolated_home / "cfg.yaml.gpudoc.bak").read_text() == config
    # restore undoes what --apply wrote, never a trial's own copies.
    restored = gpudoc_cli("restore", "--json", cwd=isolated_home)
    assert restored.returncode == 0, restored.stderr
    assert [f["path"] for f in json.loads(restored.stdout)["files"]] == [str(isolated_home / "cfg.yaml")]
    assert (isolated_home / "cfg.yaml").read_text() == config


@pytest.mark.slow
def test_no_micro_batch_that_fits_is_exit_1_with_every_trial_said(isolated_home):
    shutil.copy(JOB, isolated_home / "train.py")
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    # 2 x 16 tokens already over the budget from the second step on: nothing from 2 to 2 fits.
    done = gpudoc_cli("tune", "--min", "2", "--max", "2", "--json", "--", "python", "train.py", "--oom-above", "16",
                      "--steps", "100", cwd=isolated_home, env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["best"] is None and [(t["micro_batch_size"], t["outcome"]) for t in doc["trials"]] == [(2, "oom")]
    assert "micro batch 2 x accumulation 6: oom" in done.stderr
    # The trial is not the run `restore` undoes by default: it edited only its own copies.
    restored = gpudoc_cli("restore", cwd=isolated_home)
    assert restored.returncode == 2 and f"the latest run {doc['trials'][0]['run_id']} is a trial" in restored.stderr
