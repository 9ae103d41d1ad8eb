"""What the job was told, seen from inside real jobs (CPU torch, real `gpudoc run`): the config files
it read, the Lightning Trainer's resolved settings, the config Hydra composed with a group override."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import gpudoc_cli

JOBS = Path(__file__).resolve().parent / "jobs"

pytestmark = pytest.mark.slow


def events(work: Path, *command: str) -> tuple[int, list[dict]]:
    """Run ``command`` under `gpudoc run`; the probe's events of rank 0, as it wrote them."""
    done = gpudoc_cli("run", "--no-check", "--", *command, cwd=work)
    run_id = json.loads(gpudoc_cli("runs", "show", "--json", cwd=work).stdout)["run"]["id"]
    lines = (work / ".gpudoc" / "runs" / run_id / "probe" / "rank-0.jsonl").read_text().splitlines()
    return done.returncode, [json.loads(line) for line in lines]


def framework(found: list[dict], name: str) -> dict:
    [event] = [e for e in found if e["event"] == "framework" and e["name"] == name]
    return event["settings"]


def test_the_config_file_a_custom_loop_read_is_reported_with_what_it_held(isolated_home):
    config = isolated_home / "cfg.yaml"
    config.write_text("train:\n  batch: 2\n  accum: 5\n  schedule: [1, 2]\nname: seed\n")
    code, found = events(isolated_home, "python", str(JOBS / "custom_loop.py"), "--config", str(config),
                         "--steps", "1")
    assert code == 0
    [read] = [e for e in found if e["event"] == "config-file"]
    assert read["path"] == str(config.resolve())
    assert read["values"] == {"train.batch": 2, "train.accum": 5, "train.schedule.0": 1, "train.schedule.1": 2,
                              "name": "seed"}
    # The library's own files (torch's, PyYAML's) are not the job's configs.
    assert not any(e["event"] == "config-file" and "site-packages" in e["path"] for e in found)


def test_the_lightning_trainers_resolved_settings_are_read_from_its_training_loop(isolated_home):
    code, found = events(isolated_home, "python", str(JOBS / "lightning_job.py"), "4", "3")
    assert code == 0
    settings = framework(found, "lightning")
    assert settings["accumulate_grad_batches"] == 3 and settings["precision"] == "bf16-mixed"
    assert (settings["world_size"], settings["num_devices"], settings["num_nodes"]) == (1, 1, 1)
    assert settings["max_steps"] == 2 and settings["strategy"] == "SingleDeviceStrategy"
    steps = [e for e in found if e["event"] == "step"]
    assert [s["backward"] for s in steps] == [3, 3]  # the Trainer's accumulation, seen by the probe too
    # The optimizer steps the fit runs, as the Trainer estimates them (max_steps bounds it): the total
    # against which the record says how far the job got.
    assert settings["estimated_stepping_batches"] == 2
    record = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]
    assert (record["steps"]["count"], record["steps"]["total"], record["steps"]["source"]) == (2, 2, "probe")


def test_an_oom_before_the_first_step_still_reads_the_trainer_from_the_tracebacks_frames(isolated_home):
    code, found = events(isolated_home, "python", str(JOBS / "lightning_job.py"), "4", "3", "oom")
    assert code == 1
    assert framework(found, "lightning")["accumulate_grad_batches"] == 3
    [oom] = [e for e in found if e["event"] == "oom"]
    assert (oom["step"], oom["phase"]) == (0, "forward")
    # No step ran: the record's knobs are the Trainer's, in the profile's spellings.
    observed = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]["observed"]
    assert {k: (v["value"], v["how"]) for k, v in observed.items() if k in (
        "gradient_accumulation_steps", "precision", "world_size", "micro_batch_size")} == {
        "gradient_accumulation_steps": (3, "framework:lightning"), "precision": ("bf16", "framework:lightning"),
        "world_size": (1, "framework:lightning"), "micro_batch_size": (4, "input-shape")}


def test_hydras_composition_with_a_group_override_is_what_the_job_got(isolated_home):
    code, found = events(isolated_home, "python", str(JOBS / "hydra_job.py"), "trainer=big", "lr=0.01")
    assert code == 0
    hydra = framework(found, "hydra")
    assert hydra["choices"]["trainer"] == "big" and hydra["overrides"] == ["trainer=big", "lr=0.01"]
    assert framework(found, "omegaconf") == {"trainer.batch_size": 8, "trainer.steps": 2, "seq": 8, "lr": 0.01}
    # The group file the job composed is among the files it read; the default group's is not.
    read = {Path(e["path"]).name for e in found if e["event"] == "config-file"}
    assert "big.yaml" in read and "small.yaml" not in read
