"""gpudoc believes the job: the ladder climbs from what the probe saw the failed run train with, and
writes a knob only through a flag the job's own parser declares. Real `gpudoc run --retry-oom` chains
on the seed guides' shape (a hand-written loop whose knobs gpudoc cannot read from outside: they live
in a YAML file the script opens itself), and the rules on their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoc.bind.overrides import apply_flags
from gpudoc.commands.observed import believe, declared_flag
from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import ProfileError
from gpudoc.job.knobs import JobReading, Knob
from gpudoc.profiles.model import Profile
from gpudoc.runs.record import RunRecord
from tests.conftest import gpudoc_cli

JOB = Path(__file__).resolve().parents[1] / "probe" / "jobs" / "custom_loop.py"


def _chain(work: Path, *job_args: str, nproc: int = 1) -> tuple[int, list[dict], str]:
    (work / "cfg.yaml").write_text("train:\n  batch: 4\n  accum: 3\n")
    launcher = ["torchrun", "--nproc_per_node", str(nproc), "--monitor-interval=0.1"] if nproc > 1 else ["python"]
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "2", "--", *launcher, str(JOB), "--config", "cfg.yaml",
                      "--oom-above", "40", *job_args, cwd=work, timeout=300)
    runs = json.loads(gpudoc_cli("runs", "--json", cwd=work).stdout)["runs"]
    records = [json.loads(gpudoc_cli("runs", "show", r["id"], "--json", cwd=work).stdout)["run"] for r in runs]
    return done.returncode, records, done.stderr


def _global(record: dict) -> int:
    observed = record["observed"]
    return observed["micro_batch_size"]["value"] * observed["gradient_accumulation_steps"]["value"]


@pytest.mark.slow
def test_a_retry_chain_writes_the_jobs_own_flags_and_keeps_the_global_batch_exact(isolated_home):
    # The seed guides' shape under torchrun, two processes: every rank trains with what the relaunch wrote.
    status, records, said = _chain(isolated_home, "--steps", "2", nproc=2)
    assert status == 0, said
    first, last = records[0], records[-1]
    for record in (first, last):
        assert record["observed"]["world_size"]["value"] == 2
        assert record["observed"]["micro_batch_size"]["ranks"] == [0, 1]
    assert first["oom"]["phase"] == "forward" and last["oom"] is None
    assert "the value of its own --accum, which its parser declares" in said
    assert last["argv"][-4:] == ["--accum", "6", "--batch", "2"]
    assert _global(first) == _global(last) == 12  # 4 x 3, then 2 x 6 per rank: observed on both sides
    declared = set(first["parsers"][0]["options"])
    added = [a for a in last["argv"] if a.startswith("--") and a not in first["argv"]]
    assert added and set(added) <= declared


@pytest.mark.slow
def test_where_two_flags_held_the_value_nothing_is_written_and_the_global_batch_stays(isolated_home):
    # --steps 3 and --accum 3: which one is the accumulation cannot be told, so the halving (which must
    # raise the accumulation to keep the global batch) is not applied; the chain stops instead.
    status, records, said = _chain(isolated_home, "--steps", "3")
    assert status == 1
    assert "--accum and --steps each held 3, so which one it is cannot be told" in said
    assert "no rung of the ladder is left" in said
    assert all("--batch" not in r["argv"] and "--accum" not in r["argv"] for r in records)
    fixed = json.loads(gpudoc_cli("fix", "--json", cwd=isolated_home).stdout)
    assert any(s["rung"] == "halve-micro-batch" and "gradient_accumulation_steps" in s["reason"]
               for s in fixed["skipped"]), fixed["skipped"]


def _record(observed: dict, parsers: list | None = None) -> RunRecord:
    views = {k: {"value": v, "how": how, "ranks": [0], "others": {}} for k, (v, how) in observed.items()}
    return RunRecord(id="20260101-000000000-aaaaaa", command=["python", "t.py"], cwd=".", observed=views,
                     parsers=parsers)


def test_the_observed_value_wins_over_a_default_the_reading_assumed_and_says_so():
    job = JobReading(framework="hf-trainer", knobs={
        "micro_batch_size": Knob(4, "argv", "--per_device_train_batch_size"),
        "gradient_accumulation_steps": Knob(1, "default", "hf-trainer")})
    profile = Profile(name="job", train=job.values, job=job)
    believed, notes, unwritable = believe(profile, _record({"micro_batch_size": (4, "framework:hf-trainer"),
                                                            "gradient_accumulation_steps": (8, "backward-per-step")}))
    assert believed.train == {"micro_batch_size": 4, "gradient_accumulation_steps": 8}
    assert notes == ("read gradient_accumulation_steps 1 (default:hf-trainer); the job ran with 8 "
                     "(backward-per-step): gpudoc goes by what it ran with",)
    assert unwritable == {}


def test_a_profiles_train_is_corrected_by_what_the_job_ran_with():
    profile = Profile(name="box", train={"micro_batch_size": 8, "precision": "bf16"})
    believed, notes, _ = believe(profile, _record({"micro_batch_size": (8, "input-shape"),
                                                   "precision": ("fp32", "parameter-dtype")}))
    assert believed.train == {"micro_batch_size": 8, "precision": "fp32"}
    assert notes == ("read precision bf16 ([train] of box); the job ran with fp32 (parameter-dtype): gpudoc goes "
                     "by what it ran with",)


def test_a_nanogpt_configurators_key_is_the_place_written_as_it_takes_it():
    # The reading found no accumulation (it is train.py's own global); the configurator takes it.
    job = JobReading(framework=None, knobs={"micro_batch_size": Knob(8, "argv", "--batch_size")})
    parsers = [{"type": "configurator", "options": ["--batch_size", "--gradient_accumulation_steps", "--n_layer"],
                "values": {"batch_size": 8, "gradient_accumulation_steps": 4, "n_layer": 4}}]
    believed, notes, unwritable = believe(Profile(name="job", train=job.values, job=job), _record(
        {"micro_batch_size": (8, "input-shape"), "gradient_accumulation_steps": (4, "framework:nanogpt")}, parsers))
    assert believed.job.framework == "nanogpt" and unwritable == {}
    assert believed.job.knobs["gradient_accumulation_steps"] == Knob(4, "argv", "--gradient_accumulation_steps")
    assert notes == ("the job ran with gradient_accumulation_steps 4 (framework:nanogpt), the value of its own "
                     "--gradient_accumulation_steps, which its configurator takes: a rung of it is written there",)


def test_a_group_file_the_job_did_not_compose_is_replaced_by_hydras_override_of_the_composed_key():
    job = JobReading(framework="hydra", knobs={"micro_batch_size": Knob(2, "file", "batch_size", "conf/t/small.yaml")})
    profile = Profile(name="job", train=job.values, job=job)
    hydra = [{"type": "hydra", "options": ["trainer.batch_size", "seq"], "values": {"trainer.batch_size": 8, "seq": 8}}]
    believed, notes, _ = believe(profile, _record({"micro_batch_size": (8, "input-shape")}, hydra))
    assert believed.job.knobs["micro_batch_size"] == Knob(8, "argv", "trainer.batch_size")
    assert "trainer.batch_size in the config Hydra composed (file:conf/t/small.yaml:batch_size held 2" in notes[0]
    # No composed key held it (or the probe saw no Hydra): the knob is known, but nothing is written.
    believed, _, unwritable = believe(profile, _record({"micro_batch_size": (8, "input-shape")}))
    assert believed.train["micro_batch_size"] == 8 and "micro_batch_size" in unwritable


def test_a_knob_the_job_already_runs_with_is_not_written_again():
    # A TrainingArguments subclass turns checkpointing on: the rung that halves the batch must not
    # append --gradient_checkpointing as if it were a change.
    job = JobReading(framework="hf-trainer", knobs={"gradient_checkpointing": Knob(False, "default", "hf-trainer")})
    believed, _, _ = believe(Profile(name="job", train=job.values, job=job),
                             _record({"gradient_checkpointing": (True, "framework:hf-trainer")}))
    assert believed.train["gradient_checkpointing"] is True and believed.changed_knobs() == {}


def test_without_observations_nothing_changes():
    profile = Profile(name="box", train={"micro_batch_size": 8})
    assert believe(profile, None) == (profile, (), {})
    assert believe(profile, _record({})) == (profile, (), {})


@pytest.mark.parametrize(("values", "options", "flag", "why"), [
    ({"batch": 4, "steps": 2}, ["--batch", "--steps"], "--batch", ""),
    ({"train_batch": 4}, ["--train-batch"], "--train-batch", ""),  # argparse's dest for --train-batch
    ({"batch": 4, "accum": 4}, ["--batch", "--accum"], None, "--batch and --accum each held 4"),
    ({"bf16": True}, ["--bf16"], None, "no flag its parser declares held 1"),  # a switch's True is not a count
    ({"batch": 4}, ["-b"], None, "no flag its parser declares held 4"),  # no long flag to write
])
def test_a_flag_is_the_knobs_place_only_when_exactly_one_declared_flag_held_its_value(values, options, flag, why):
    found, reason = declared_flag([{"options": options, "values": values}], 1 if "bf16" in values else 4)
    assert found == flag and why in reason


def test_a_bound_flag_is_replaced_in_place_or_appended_and_must_be_a_flag():
    edits = ArgEdits(["--batch", "4", "--lr", "0.1"])
    assert apply_flags(edits, {"flags": {"micro_batch_size": "--batch", "gradient_accumulation_steps": "--accum"}},
                       {"micro_batch_size": 2, "gradient_accumulation_steps": 6}) == {
        "micro_batch_size", "gradient_accumulation_steps"}
    assert edits.result() == ["--batch", "2", "--lr", "0.1", "--accum", "6"]
    with pytest.raises(ProfileError, match=r"\[bind.flags\] micro_batch_size: expected a flag of the job"):
        apply_flags(ArgEdits([]), {"flags": {"micro_batch_size": "batch"}}, {"micro_batch_size": 2})
