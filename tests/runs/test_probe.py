"""The probe's files read as untrusted input: bounded, defensive, and believed only where they hold
what the probe writes."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoc.runs import probe
from tests.cli.test_fuzz import EXAMPLES

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")


def _write(directory, name: str, *events: object) -> None:
    (directory / "probe").mkdir(exist_ok=True)
    with open(directory / "probe" / name, "w") as out:
        for event in events:
            out.write((event if isinstance(event, str) else json.dumps(event)) + "\n")


def _rank(batch: int, world: int = 2) -> list[dict]:
    return [{"event": "start", "pid": 1, "rank": 0}, {"event": "model", "parameters": 10, "trainable": 4,
                                                      "dtypes": ["bfloat16"]},
            {"event": "input", "shape": [batch, 128], "dtype": "int64"},
            {"event": "step", "n": 1, "seconds": None, "backward": 8, "world_size": world, "distributed": True,
             "optimizer": "AdamW", "state_dtype": "float32", "autocast": "off", "peak_allocated": 5},
            {"event": "step", "n": 2, "seconds": 0.5, "backward": 8, "world_size": world, "distributed": True,
             "optimizer": "AdamW", "autocast": "off", "peak_allocated": 7}]


def test_ranks_that_disagree_are_named(tmp_path):
    _write(tmp_path, "rank-0.jsonl", *_rank(4))
    _write(tmp_path, "rank-1.jsonl", *_rank(2))
    read = probe.read(tmp_path)
    assert read["observed"]["micro_batch_size"] == {"value": 4, "how": "input-shape", "ranks": [0], "others": {"1": 2}}
    assert read["observed"]["precision"] == {"value": "bf16-true", "how": "parameter-dtype", "ranks": [0, 1],
                                             "others": {}}
    assert read["observed"]["gradient_accumulation_steps"]["value"] == 8
    steps = read["steps"]
    assert {k: v for k, v in steps.items() if k != "series"} == {
        "count": 2, "seconds_per_step": 0.5, "samples_per_second": 4 * 8 * 2 / 0.5,
        "tokens_per_second": 4 * 8 * 2 / 0.5 * 128,  # the sequence length the input showed
        "peak_allocated_bytes": 7, "peak_reserved_bytes": None, "capacity_bytes": None, "total": None,
        "unit": "step", "source": "probe"}
    assert steps["series"] == [{"step": 1, "seconds": None, "peak_allocated_bytes": 5, "peak_reserved_bytes": None},
                               {"step": 2, "seconds": 0.5, "peak_allocated_bytes": 7, "peak_reserved_bytes": None}]


def test_the_peak_is_the_fullest_ranks(tmp_path):
    # Rank 1 holds more (a rank that keeps extra buffers): its GPU is the one that runs out.
    _write(tmp_path, "rank-0.jsonl", *_rank(4))
    _write(tmp_path, "rank-1.jsonl", *[{**e, "peak_allocated": 11, "peak_reserved": 13} if e["event"] == "step" else e
                                       for e in _rank(4)])
    steps = probe.read(tmp_path)["steps"]
    assert (steps["peak_allocated_bytes"], steps["peak_reserved_bytes"]) == (11, 13)
    assert steps["seconds_per_step"] == 0.5 and steps["count"] == 2  # the rest: the first rank's


def test_lines_that_are_not_events_are_skipped_and_counted(tmp_path):
    _write(tmp_path, "rank-0.jsonl", "not json", "[1, 2]", json.dumps({"no": "event"}), "x" * 70_000, *_rank(4))
    read = probe.read(tmp_path)
    assert read["observed"]["micro_batch_size"]["value"] == 4
    assert read["probe_errors"] == ["4 line(s) of the probe's files were not events and were skipped"]


def test_values_of_the_wrong_shape_are_not_believed(tmp_path):
    events = _rank(4)
    events[2]["shape"] = ["eight", 128]
    events[3].update(backward=-3, world_size="two")
    events[4].update(backward=True, world_size=None)
    _write(tmp_path, "rank-0.jsonl", *events, {"event": "oom", "phase": "elsewhere", "step": "1",
                                               "breakdown": {"parameters": -1, "gradients": 12, "x": 1}})
    read = probe.read(tmp_path)
    assert {"micro_batch_size", "max_seq_len", "gradient_accumulation_steps", "world_size"}.isdisjoint(read["observed"])
    assert read["oom"] == {"rank": 0, "step": None, "phase": None, "breakdown": {"gradients": 12}, "snapshot": None,
                           "top": []}


def test_a_huge_file_is_read_only_to_its_cap(tmp_path):
    _write(tmp_path, "rank-0.jsonl", *_rank(4))
    with open(tmp_path / "probe" / "rank-0.jsonl", "a") as out:
        line = json.dumps({"event": "step", "n": 3, "padding": "x" * 1000}) + "\n"
        out.write(line * (12 * 2**20 // len(line)))  # 12 MB
    read = probe.read(tmp_path)
    assert read["observed"]["micro_batch_size"]["value"] == 4
    assert read["steps"]["count"] == 3  # what lay within the cap


def test_a_planted_link_and_other_names_are_not_read(tmp_path):
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("\n".join(json.dumps(e) for e in _rank(4)))
    (tmp_path / "probe").mkdir()
    os.symlink(elsewhere, tmp_path / "probe" / "rank-0.jsonl")
    _write(tmp_path, "notes.jsonl", *_rank(4))
    _write(tmp_path, "rank-99999.jsonl", *_rank(4))
    read = probe.read(tmp_path)
    assert read["observed"] is None and read["oom"] is None


def test_nothing_written_is_nothing_observed(tmp_path):
    assert probe.read(tmp_path) == {"observed": None, "steps": None, "oom": None, "oom_recovered": None, "left": None,
                                    "parsers": None, "probe_errors": None}


def test_a_parser_is_kept_with_what_it_declares_and_nothing_else(tmp_path):
    _write(tmp_path, "rank-0.jsonl", {"event": "parser", "prog": "train.py", "type": "HfArgumentParser",
                                      "options": ["--output_dir", "-h", "not-a-flag", 7],
                                      "values": {"output_dir": "out", "lr": 0.1, "big": "x" * 600, "list": [1],
                                                 "hub_token": "hf_abc", "wandb_api_key": "k"}},
           *_rank(4))
    assert probe.read(tmp_path)["parsers"] == [{"prog": "train.py", "type": "HfArgumentParser",
                                                "options": ["--output_dir", "-h"],
                                                "values": {"output_dir": "out", "lr": 0.1, "hub_token": "<redacted>",
                                                           "wandb_api_key": "<redacted>"}}]


def test_a_frameworks_resolved_settings_answer_before_the_first_step_outer_framework_first(tmp_path):
    # An HF Trainer over a DeepSpeed engine, out of memory before any step: the Trainer's arguments
    # (written first, at train begin) win where both speak; the engine adds what only it says.
    _write(tmp_path, "rank-0.jsonl",
           {"event": "framework", "name": "hf-trainer", "settings": {
               "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "bf16": True, "fp16": False}},
           {"event": "framework", "name": "deepspeed", "settings": {
               "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}},
           {"event": "framework", "name": "lightning", "settings": {"precision": "16-mixed", "world_size": "2"}},
           {"event": "oom", "phase": "forward", "step": 0})
    observed = probe.read(tmp_path)["observed"]
    assert {k: (v["value"], v["how"]) for k, v in observed.items()} == {
        "micro_batch_size": (4, "framework:hf-trainer"), "gradient_accumulation_steps": (2, "framework:hf-trainer"),
        "precision": ("bf16", "framework:hf-trainer")}
    _write(tmp_path, "rank-0.jsonl",
           {"event": "framework", "name": "deepspeed", "settings": {"train_micro_batch_size_per_gpu": 8,
                                                                    "gradient_accumulation_steps": -1}},
           {"event": "framework", "name": "lightning", "settings": {"precision": "16-mixed", "world_size": "2"}})
    observed = probe.read(tmp_path)["observed"]
    # A world size written as a string, a negative accumulation: not believed.
    assert {k: (v["value"], v["how"]) for k, v in observed.items()} == {
        "micro_batch_size": (8, "framework:deepspeed"), "precision": ("fp16", "framework:lightning")}


def test_what_a_configurator_torchtune_or_hydra_handed_the_job_is_read_in_the_profiles_spellings(tmp_path):
    # A nanoGPT-style script's globals after its configurator ran; the keys it takes are its flags.
    _write(tmp_path, "rank-0.jsonl", {"event": "parser", "prog": "configurator.py", "type": "configurator",
                                      "options": ["--batch_size", "--dtype", "--gradient_accumulation_steps"],
                                      "values": {"batch_size": 12, "gradient_accumulation_steps": 5,
                                                 "block_size": 0, "dtype": "bfloat16"}})
    read = probe.read(tmp_path)
    assert {k: (v["value"], v["how"]) for k, v in read["observed"].items()} == {
        "micro_batch_size": (12, "framework:nanogpt"), "gradient_accumulation_steps": (5, "framework:nanogpt"),
        "precision": ("bf16", "framework:nanogpt")}  # a block size of 0 is no sequence length
    assert read["parsers"][0]["options"] == ["--batch_size", "--dtype", "--gradient_accumulation_steps"]
    # torchtune's parsed config; Hydra's composed one (its keys are what an override names).
    config = {"batch_size": 4, "gradient_accumulation_steps": 2, "enable_activation_checkpointing": True,
              "dtype": "bf16", "tokenizer.max_seq_len": 512}
    _write(tmp_path, "rank-0.jsonl", {"event": "framework", "name": "torchtune", "settings": config})
    read = probe.read(tmp_path)
    assert {k: v["value"] for k, v in read["observed"].items()} == {
        "micro_batch_size": 4, "gradient_accumulation_steps": 2, "gradient_checkpointing": True, "precision": "bf16",
        "max_seq_len": 512}
    assert read["parsers"] == [{"prog": "torchtune", "type": "torchtune", "options": list(config), "values": config}]
    _write(tmp_path, "rank-0.jsonl", {"event": "framework", "name": "omegaconf", "settings": {"trainer.batch_size": 8}},
           {"event": "framework", "name": "hydra", "settings": {"choices": {"trainer": "big"}, "overrides": []}})
    assert probe.read(tmp_path)["parsers"] == [{"prog": "hydra", "type": "hydra", "options": ["trainer.batch_size"],
                                                "values": {"trainer.batch_size": 8}}]


# -- the probe's directory and files are the job's to write: anyone's, in a shared folder ---------

def test_a_probe_directory_that_is_a_link_is_not_read(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rank-0.jsonl").write_text("\n".join(json.dumps(e) for e in _rank(4)) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(elsewhere, run / "probe")
    read = probe.read(run)
    assert read["observed"] is None
    assert read["probe_errors"] == [f"{run / 'probe'} is a symbolic link (to {elsewhere}): not read"]


def test_a_probe_file_that_others_can_write_is_not_believed(tmp_path):
    _write(tmp_path, "rank-0.jsonl", *_rank(4))
    _write(tmp_path, "rank-1.jsonl", *_rank(2))
    os.chmod(tmp_path / "probe" / "rank-1.jsonl", 0o666)
    read = probe.read(tmp_path)
    assert read["observed"]["micro_batch_size"] == {"value": 4, "how": "input-shape", "ranks": [0], "others": {}}
    [said] = read["probe_errors"]
    assert said.startswith(f"{tmp_path / 'probe' / 'rank-1.jsonl'} (owner ") and "mode 0666" in said
    assert said.endswith(": not read")


@needs_root
def test_a_probe_file_another_user_owns_is_not_believed(tmp_path):
    _write(tmp_path, "rank-0.jsonl", *_rank(4))
    os.chown(tmp_path / "probe" / "rank-0.jsonl", 65534, 65534)
    read = probe.read(tmp_path)
    assert read["observed"] is None and read["oom"] is None
    assert read["probe_errors"] == [f"{tmp_path / 'probe' / 'rank-0.jsonl'} belongs to nobody, not to you (root): "
                                    "not read"]


def test_a_fifo_in_place_of_a_rank_file_does_not_block(tmp_path):
    (tmp_path / "probe").mkdir()
    os.mkfifo(tmp_path / "probe" / "rank-0.jsonl")
    _write(tmp_path, "rank-1.jsonl", *_rank(4))
    assert probe.read(tmp_path)["observed"]["micro_batch_size"]["ranks"] == [1]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)
_KEYS = st.sampled_from(["event", "shape", "dtype", "backward", "world_size", "distributed", "optimizer",
                         "state_dtype", "autocast", "peak_allocated", "peak_reserved", "seconds", "n", "parameters",
                         "trainable", "dtypes", "settings", "name", "options", "values", "prog", "phase", "step",
                         "breakdown", "snapshot", "top", "hook", "error"])
_EVENTS = st.sampled_from(["start", "model", "input", "step", "framework", "parser", "oom", "error", "config-file",
                          "interrupted"])


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_EVENTS, st.dictionaries(_KEYS, _JSON, max_size=8)), max_size=12))
def test_any_json_the_job_writes_is_read_without_a_crash(tmp_path, events):
    _write(tmp_path, "rank-0.jsonl", *({**fields, "event": fields.get("event", name)} for name, fields in events))
    read = probe.read(tmp_path)
    json.dumps(read, default=str)  # what goes into the record
    assert set(read) == {"observed", "steps", "oom", "oom_recovered", "left", "parsers", "probe_errors"}


def test_the_memory_history_is_on_for_relaunches_and_stops_past_the_failed_step(store):
    from gpudoc.runs.record import RunRecord

    store.create(RunRecord(id="20260101-000000000-aaaaaa", command=["t"], cwd=".", oom={"step": 7}))
    assert probe.snapshot_setting({}, store, None) == ("off", None)  # a first launch pays nothing
    assert probe.snapshot_setting({}, store, "20260101-000000000-aaaaaa") == ("on-oom", 7)
    assert probe.snapshot_setting({"snapshot": "off"}, store, "20260101-000000000-aaaaaa") == ("off", 7)
    assert probe.snapshot_setting({"snapshot": "on-oom"}, store, None) == ("on-oom", None)
    env = probe.launch_environment({}, store.root, ["python", "t.py"], None, snapshot=("on-oom", 7))
    assert (env["GPUDOC_PROBE_SNAPSHOT"], env["GPUDOC_PROBE_SNAPSHOT_UNTIL"]) == ("on-oom", "7")
    assert "GPUDOC_PROBE_SNAPSHOT" not in probe.launch_environment({}, store.root, ["python"], None)


def test_an_ooms_snapshot_is_only_the_ranks_own_file_and_its_top_is_checked(tmp_path):
    (tmp_path / "probe").mkdir()
    own = tmp_path / "probe" / "snapshot-rank-0.pickle.gz"
    own.write_bytes(b"\x1f\x8b")
    top = [{"where": "model.py:88 forward", "module": "model", "bytes": 10}, {"where": 5, "bytes": 1},
           {"where": "x.py:1 f", "module": 3, "bytes": -4}, "junk"]
    _write(tmp_path, "rank-0.jsonl", {"event": "oom", "phase": "forward", "step": 0, "snapshot": str(own), "top": top})
    oom = probe.read(tmp_path)["oom"]
    assert oom["snapshot"] == str(own) and oom["top"] == [top[0]]
    for planted in ("/etc/passwd", str(tmp_path / "probe" / "snapshot-rank-1.pickle.gz")):
        _write(tmp_path, "rank-0.jsonl", {"event": "oom", "step": 0, "snapshot": planted})
        assert probe.read(tmp_path)["oom"]["snapshot"] is None


def test_a_step_an_error_left_is_the_ooms_phase_only_when_the_log_says_it_ran_out_of_memory(tmp_path):
    from gpudoc.runs.record import RunRecord

    _write(tmp_path, "rank-0.jsonl", {"event": "start", "pid": 1, "rank": 0},
           {"event": "interrupted", "phase": "optimizer", "step": 3}, {"event": "interrupted", "phase": "x", "step": 1})
    said: list[str] = []
    record = RunRecord(id="r", command=["python", "t.py"], cwd=str(tmp_path), cause="gpu_oom", argv=["python", "t.py"])
    assert probe.observations(tmp_path, record, said.append)["oom"] == {
        "rank": 0, "step": 3, "phase": "optimizer", "breakdown": {}, "snapshot": None, "top": []}
    record.cause = "error"  # another error left it: no OOM to place
    assert probe.observations(tmp_path, record, said.append)["oom"] is None
    # An OOM the probe recorded itself wins, with its breakdown.
    _write(tmp_path, "rank-0.jsonl", {"event": "interrupted", "phase": "backward", "step": 0},
           {"event": "oom", "phase": "forward", "step": 1, "breakdown": {"parameters": 8}})
    record.cause = "gpu_oom"
    seen = probe.observations(tmp_path, record, said.append)
    assert (seen["oom"]["phase"], seen["oom"]["breakdown"], "left" in seen) == ("forward", {"parameters": 8}, False)
    assert said == []


def test_the_total_comes_from_what_the_framework_resolved():
    assert probe.total_from_settings([{"event": "framework", "name": "hf-trainer",
                                 "settings": {"max_steps": -1, "total_steps": 750}}]) == 750
    assert probe.total_from_settings([{"event": "framework", "name": "lightning",
                                 "settings": {"max_steps": -1, "estimated_stepping_batches": 120}}]) == 120
    assert probe.total_from_settings([{"event": "parser", "type": "configurator", "values": {"max_iters": 5000}}]) == 5000
    assert probe.total_from_settings([{"event": "framework", "name": "lightning", "settings": {"max_steps": -1}}]) is None
    # A name no adapter has, or settings that are not the framework's: nothing believed.
    assert probe.total_from_settings([{"event": "framework", "name": "nope", "settings": {"max_steps": 9}}]) is None
    assert probe.total_from_settings([{"event": "framework", "name": "hf-trainer", "settings": {"max_steps": True}}]) is None


def test_an_oom_the_job_went_on_from_is_said_with_the_batches_and_is_not_the_runs_oom(tmp_path):
    # HF's auto_find_batch_size: 8 ran out in the forward, 4 in backward, 2 trained.
    start, step = _rank(8)[:2], _rank(8)[3:]
    oom = {"event": "oom", "phase": "forward", "step": 0, "breakdown": {"parameters": 8}}
    tried = [{"event": "input", "shape": [n, 128], "dtype": "int64"} for n in (8, 4, 2)]
    _write(tmp_path, "rank-0.jsonl", *start, tried[0], oom, tried[1], {**oom, "phase": "backward"}, tried[2], *step)
    read = probe.read(tmp_path)
    assert read["oom"] is None
    assert read["oom_recovered"] == {"rank": 0, "step": 0, "phase": "forward", "micro_batch_size": 8,
                                     "went_on_with": 2, "times": 2}
    assert read["observed"]["micro_batch_size"]["value"] == 2 and read["steps"]["samples_per_second"] == 2 * 8 * 2 / 0.5
    # An OOM after the last input the job showed is the one that ended it.
    _write(tmp_path, "rank-0.jsonl", *start, tried[0], oom, tried[2], *step, {**oom, "step": 2})
    read = probe.read(tmp_path)
    assert (read["oom"]["step"], read["oom_recovered"]["went_on_with"], read["oom_recovered"]["times"]) == (2, 2, 1)


@pytest.mark.parametrize("framework,precision", [
    (None, {"value": "fp32", "how": "parameter-dtype"}),
    ({"bf16": True, "fp16": False}, {"value": "bf16", "how": "framework:hf-trainer"}),
    ({"bf16": False, "fp16": False}, {"value": "fp32", "how": "framework:hf-trainer"}),
])
def test_fp32_guessed_from_the_parameters_yields_to_what_the_framework_entered(tmp_path, framework, precision):
    # A compiled model's wrapper (accelerate's, for HF's --bf16) enters autocast where the probe does
    # not look: fp32 parameters and no autocast seen are a guess, the Trainer's arguments are not.
    events = [dict(e, dtypes=["float32"]) if e["event"] == "model" else e for e in _rank(4, world=1)]
    if framework is not None:
        events.append({"event": "framework", "name": "hf-trainer", "settings": framework})
    _write(tmp_path, "rank-0.jsonl", *events)
    observed = probe.read(tmp_path)["observed"]["precision"]
    assert {k: observed[k] for k in ("value", "how")} == precision
