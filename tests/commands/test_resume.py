"""When a relaunch resumes: the framework known, a complete checkpoint written since the chain
began, the global batch unchanged, nothing changed that the checkpoint holds, ``[run] resume`` on."""

from __future__ import annotations

import json
from dataclasses import replace

from gpudoc.commands.resume import with_resume
from gpudoc.commands.run_options import RunOptions
from gpudoc.profiles.from_job import job_profile
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.runs.store import new_run_id
from tests.conftest import captured_workspace

COMMAND = ["python", "train.py", "--output_dir", "out", "--per_device_train_batch_size", "8",
           "--gradient_accumulation_steps", "2"]


def _setup(tmp_path):
    folder = tmp_path / "out" / "checkpoint-20"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 20}))
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    ws = captured_workspace(tmp_path)
    before = job_profile(COMMAND, tmp_path)
    record = RunRecord(id=new_run_id(), command=list(COMMAND), cwd=str(tmp_path), profile=before.to_dict(),
                       started_at=now_iso(), cause="gpu_oom")
    return ws, before, record


def _relaunch(ws, record, after):
    options = with_resume(RunOptions(command=list(COMMAND), resume={"stale": True}), record, after, ws)
    return options.resume, ws.console.err.getvalue()


def test_the_halving_keeps_the_global_batch_and_resumes(tmp_path):
    ws, before, record = _setup(tmp_path)
    resume, said = _relaunch(ws, record, before.with_train({"micro_batch_size": 4, "gradient_accumulation_steps": 4}))
    assert resume == {"framework": "hf-trainer", "path": "out/checkpoint-20", "step": 20,
                      "switch": ["--resume_from_checkpoint", "out/checkpoint-20"]}
    assert said == "gpudoc: resuming from out/checkpoint-20 (step 20): --resume_from_checkpoint out/checkpoint-20\n"


def test_a_changed_global_batch_starts_over_and_says_why(tmp_path):
    ws, before, record = _setup(tmp_path)
    resume, said = _relaunch(ws, record, before.with_train({"micro_batch_size": 4}))
    assert resume is None
    assert "not resuming from out/checkpoint-20 (step 20): the global batch changes (16 -> 8)" in said


def test_a_knob_the_checkpoint_holds_starts_over(tmp_path):
    ws, before, record = _setup(tmp_path)
    resume, said = _relaunch(ws, record, before.with_train({"optimizer": "adamw_8bit"}))
    assert resume is None and "optimizer changes (None -> adamw_8bit)" in said


def test_resume_false_turns_it_off(tmp_path):
    ws, before, record = _setup(tmp_path)
    resume, said = _relaunch(ws, record, replace(before, run={"resume": False}))
    assert resume is None and said == ""


def test_no_checkpoint_or_an_unknown_framework_starts_over_silently(tmp_path):
    ws, before, record = _setup(tmp_path)
    assert _relaunch(ws, record, replace(before, job=None, bind={"env": True}))[0] is None  # a profile, no preset
    (tmp_path / "out" / "checkpoint-20" / "trainer_state.json").unlink()
    assert _relaunch(ws, record, before) == (None, "")
