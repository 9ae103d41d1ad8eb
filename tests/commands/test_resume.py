"""When a relaunch resumes: the framework known, a complete checkpoint written since the chain
began, the global batch unchanged, nothing changed that the checkpoint holds, ``[run] resume`` on."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from gpudoc.commands.resume import record_written, with_resume
from gpudoc.commands.run_options import RunOptions
from gpudoc.profiles.from_job import job_profile
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.runs.store import new_run_id
from tests.conftest import captured_workspace

COMMAND = ["python", "train.py", "--output_dir", "out", "--per_device_train_batch_size", "8",
           "--gradient_accumulation_steps", "2"]


def _checkpoint(out, step):
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


def _setup(tmp_path):
    """A failed run that wrote out/checkpoint-20 and recorded it, as `gpudoc run` does when a run ends."""
    ws = captured_workspace(tmp_path)
    before = job_profile(COMMAND, tmp_path)
    record = RunRecord(id=new_run_id(), command=list(COMMAND), cwd=str(tmp_path), profile=before.to_dict(),
                       started_at=now_iso(), cause="gpu_oom", status="failed")
    _checkpoint(tmp_path / "out", 20)
    record_written(record, before, tmp_path)
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


# -- only the chain's own checkpoints, never another user's (SPEC "Trust") ------------------------

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")


def _chown_tree(folder, uid):
    for path in (folder, *folder.rglob("*")):
        os.lchown(path, uid, uid)


@needs_root
def test_a_checkpoint_another_user_planted_is_refused_naming_its_owner(tmp_path):
    ws, before, record = _setup(tmp_path)
    planted = _checkpoint(tmp_path / "out", 99)  # a higher step: today's pick
    _chown_tree(planted, NOBODY)
    resume, said = _relaunch(ws, record, before)
    assert resume is not None and resume["path"] == "out/checkpoint-20"
    assert f"gpudoc: not resuming from out/checkpoint-99: {planted} belongs to nobody, not to you" in said


@needs_root
def test_one_file_planted_inside_the_chains_own_checkpoint_refuses_it(tmp_path):
    ws, before, record = _setup(tmp_path)
    pickle = tmp_path / "out" / "checkpoint-20" / "rng_state.pth"  # the Trainer unpickles it on resume
    pickle.write_bytes(b"\x80\x04N.")
    os.chown(pickle, NOBODY, NOBODY)
    resume, said = _relaunch(ws, record, before)
    assert resume is None
    assert f"not resuming from out/checkpoint-20: {pickle} belongs to nobody" in said


def test_a_world_writable_file_in_the_checkpoint_refuses_it(tmp_path):
    ws, before, record = _setup(tmp_path)
    weights = tmp_path / "out" / "checkpoint-20" / "model.safetensors"
    os.chmod(weights, 0o666)
    resume, said = _relaunch(ws, record, before)
    assert resume is None and f"{weights} (owner " in said and "can be written by every user (mode 0666)" in said


def test_a_link_out_of_the_output_dir_is_never_resumed_from(tmp_path):
    ws, before, record = _setup(tmp_path)
    elsewhere = _checkpoint(tmp_path / "elsewhere", 50)  # complete, and the user's own: only the link is wrong
    (tmp_path / "out" / "checkpoint-50").symlink_to(elsewhere)
    resume, said = _relaunch(ws, record, before)
    assert resume is not None and resume["path"] == "out/checkpoint-20"
    assert "not resuming from out/checkpoint-50: " in said and f"leads out of the output folder {tmp_path / 'out'}" in said


def test_a_checkpoint_another_job_wrote_after_the_chain_began_is_not_resumed(tmp_path):
    ws, before, record = _setup(tmp_path)
    _checkpoint(tmp_path / "out", 40)  # same user, same output_dir, but no run of this chain wrote it
    resume, said = _relaunch(ws, record, before)
    assert resume is not None and resume["path"] == "out/checkpoint-20"
    assert "not resuming from out/checkpoint-40: no run of this chain wrote it" in said


def test_a_checkpoint_rewritten_since_its_run_recorded_it_is_not_that_run_s(tmp_path):
    ws, before, record = _setup(tmp_path)
    state = tmp_path / "out" / "checkpoint-20" / "trainer_state.json"
    state.unlink()
    state.write_text(json.dumps({"global_step": 20}))  # another save to the same path: a new file
    assert _relaunch(ws, record, before)[0] is None


def test_a_run_records_only_what_it_may_resume_from(tmp_path):
    _ws, before, record = _setup(tmp_path)
    assert [stamp["path"] for stamp in record.checkpoints] == ["out/checkpoint-20"]
    (tmp_path / "out" / "checkpoint-30").symlink_to(_checkpoint(tmp_path / "elsewhere", 30))
    record_written(record, before, tmp_path)
    assert [stamp["path"] for stamp in record.checkpoints] == ["out/checkpoint-20"]  # the link is not recorded
    done = replace(record, status="ok", checkpoints=[])
    record_written(done, before, tmp_path)
    assert done.checkpoints == []  # a run that finished is never relaunched


def test_a_checkpoint_stamped_after_the_run_ended_is_not_recorded_as_its_own(tmp_path):
    import time

    _ws, before, record = _setup(tmp_path)
    record.ended_at = now_iso()
    later = _checkpoint(tmp_path / "out", 90) / "trainer_state.json"
    future = time.time() + 3600  # another job's save, or a clock set to look like this run's
    os.utime(later, (future, future))
    record_written(record, before, tmp_path)
    assert [stamp["path"] for stamp in record.checkpoints] == ["out/checkpoint-20"]
