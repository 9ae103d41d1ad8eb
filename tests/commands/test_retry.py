"""One --retry-oom step: diagnose the record, pick the first profile-changing rung, write, reload."""

from __future__ import annotations

import json
import socket
import sys

from gpudoc.commands.relaunch import next_step
from gpudoc.commands.retry import job_torch_facts, record_diagnosis, verify_arrival
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.profiles.loader import load_profile_file
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from tests.conftest import captured_workspace, gpudoc_cli

OOM_WITH_STRAY = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 23.68 GiB of which 1.50 GiB is free. Process 999 has 6.00 GiB memory in use. Including non-PyTorch "
    "memory, this process has 16.10 GiB memory in use. Of the allocated memory 15.20 GiB is allocated by "
    "PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.\n"
)
PROFILE = """\
# keep me
[env]
PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"

[train]
micro_batch_size = 4  # per GPU
gradient_accumulation_steps = 2
"""


def setup(tmp_path, log: str, diagnosis=None):
    path = tmp_path / "gpudoc.toml"
    path.write_text(PROFILE)
    profile = load_profile_file(path)
    store = RunStore(tmp_path / ".gpudoc")
    record = RunRecord(id="20250101-000000-aaaaaa", command=["python", "train.py"], cwd=str(tmp_path),
                       profile=profile.to_dict(), exit_code=1, status="failed", cause="gpu_oom",
                       diagnosis=diagnosis, host=socket.gethostname())
    store.create(record)
    store.log_path(record.id).write_text(log)
    return profile, store, record


def test_next_step_skips_free_stray_memory_and_applies_the_batch_rung(tmp_path):
    profile, _store, record = setup(tmp_path, OOM_WITH_STRAY)
    new_profile, rung, _said = next_step(record, profile, captured_workspace(tmp_path), allow_semantic=False)
    assert rung.rung == "halve-micro-batch"
    assert new_profile.knobs["micro_batch_size"] == 2 and new_profile.knobs["gradient_accumulation_steps"] == 4
    assert (tmp_path / "gpudoc.toml").read_text().startswith("# keep me\n")
    assert "micro_batch_size = 2  # per GPU" in (tmp_path / "gpudoc.toml").read_text()


def test_record_without_diagnosis_is_diagnosed_from_its_log(tmp_path):
    _profile, store, record = setup(tmp_path, OOM_WITH_STRAY)
    diag = record_diagnosis(record, store)
    assert diag.cause == "gpu_oom" and diag.requested_bytes == 2 * 1024**3


def test_stored_diagnosis_wins_and_non_memory_failure_gives_nothing(tmp_path):
    profile, _store, record = setup(tmp_path, OOM_WITH_STRAY, diagnosis=Diagnosis(cause="host_oom", summary="Killed"))
    assert next_step(record, profile, captured_workspace(tmp_path), allow_semantic=True)[:2] == (None, None)
    assert (tmp_path / "gpudoc.toml").read_text() == PROFILE


def test_exhausted_ladder_gives_nothing(tmp_path):
    profile, _store, record = setup(tmp_path, OOM_WITH_STRAY.replace("Process 999 has 6.00 GiB memory in use. ", ""))
    (tmp_path / "gpudoc.toml").write_text(PROFILE.replace("micro_batch_size = 4", "micro_batch_size = 1"))
    profile = load_profile_file(tmp_path / "gpudoc.toml")
    assert next_step(record, profile, captured_workspace(tmp_path), allow_semantic=False)[:2] == (None, None)


def test_the_jobs_torch_is_found_on_the_jobs_own_path(tmp_path):
    import os
    import sys

    # A `torchrun` console script on the job's PATH (not gpudoc's) names the job's interpreter.
    bindir = tmp_path / "job-bin"
    bindir.mkdir()
    script = bindir / "torchrun"
    script.write_text(f"#!{sys.executable}\nprint()\n")
    script.chmod(0o755)
    record = RunRecord(id="x", command=["torchrun", "--nproc_per_node=2", "train.py"], cwd=str(tmp_path))
    facts = job_torch_facts(record, {"PATH": str(bindir)})
    assert facts.torch.python == sys.executable
    assert facts.torch.alloc_env_name == "PYTORCH_ALLOC_CONF"  # the venv's torch 2.13
    assert job_torch_facts(record, {"PATH": os.defpath}).torch.python == ""  # not on that PATH: unknown


IGNORES_KNOBS = """\
import sys
print("knobs: micro_batch_size=8", flush=True)  # the job's own value, whatever gpudoc exports
sys.stderr.write({oom!r})
sys.exit(1)
"""
SILENT_SAME_OOM = """\
import sys
sys.stderr.write({oom!r})
sys.exit(1)
"""


def _ignoring_job(tmp_path, script: str):
    (tmp_path / "train.py").write_text(script.format(oom=OOM_WITH_STRAY))
    (tmp_path / "gpudoc.toml").write_text("[train]\nmicro_batch_size = 8\ngradient_accumulation_steps = 2\n"
                                          "[bind]\nenv = true\n")
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "4", "--", sys.executable, "train.py", cwd=tmp_path)
    records = sorted(RunStore(tmp_path / ".gpudoc").records(), key=lambda r: r.started_at or "")
    return done, records


def test_a_job_that_prints_its_old_value_stops_the_ladder_after_one_relaunch(tmp_path):
    done, records = _ignoring_job(tmp_path, IGNORES_KNOBS)
    assert done.returncode == 1
    assert len(records) == 2  # not five tries of changes that change nothing
    assert ("gpudoc: micro_batch_size = 4 did not reach the job: the job printed micro_batch_size = 8 again, "
            "not 4; bind micro_batch_size where the job reads it") in done.stderr
    assert "--retry-oom stopped" in done.stderr and "--retry-oom 2/4" not in done.stderr
    # Relaunched, the first attempt pointed nowhere; the chain's end points to fix on its last run.
    assert [line.strip() for line in done.stderr.splitlines() if "gpudoc fix" in line] == [
        "gpudoc: --retry-oom stopped: the next rung would change a setting the job does not read "
        f"(see `gpudoc fix {records[1].id}`)"]
    assert records[1].arrival == {"missing": {"micro_batch_size": "the job printed micro_batch_size = 8 again, not 4"},
                                  "confirmed": [], "source": {"micro_batch_size": "echo"}}


def test_a_silent_job_whose_oom_did_not_move_stops_the_ladder(tmp_path):
    done, records = _ignoring_job(tmp_path, SILENT_SAME_OOM)
    assert done.returncode == 1 and len(records) == 2
    assert ("micro_batch_size = 4 did not reach the job: the out-of-memory error is the same as before the change "
            "(asked for 2.0 GiB with 15.2 GiB allocated)") in done.stderr


def test_fix_on_a_run_whose_change_did_not_arrive_says_so_and_proposes_no_further_rung_of_it(tmp_path):
    _done, records = _ignoring_job(tmp_path, IGNORES_KNOBS)
    shown = gpudoc_cli("fix", "--json", cwd=tmp_path)
    body = json.loads(shown.stdout)
    assert body["notes"][0] == (
        f"micro_batch_size did not reach the job in run {records[1].id} (the job printed micro_batch_size = 8 "
        "again, not 4): no rung of it is proposed until the job reads it; bind micro_batch_size where the job "
        "reads it: [bind] args = PRESET for its flags, [bind.files] for its config file, a {micro_batch_size} "
        "placeholder in the command, or read GPUDOC_MICRO_BATCH_SIZE in the job")
    # Without the check the ladder would go on to 4 -> 2, which the job would not see either.
    assert not [s for s in body["suggestions"] if "micro_batch_size" in s["changes"]]
    assert {"rung": "halve-micro-batch",
            "reason": f"micro_batch_size did not reach the job (run {records[1].id}: the job printed "
                      "micro_batch_size = 8 again, not 4)"} in body["skipped"]
    gpudoc_cli("fix", "--apply", cwd=tmp_path)
    assert "micro_batch_size = 4\n" in (tmp_path / "gpudoc.toml").read_text()  # not halved again


def _relaunched(tmp_path, observed: dict | None) -> tuple[RunStore, RunRecord, RunRecord]:
    """A failed run at micro batch 4 and its relaunch at 2, whose banner printed 2 and whose OOM moved."""
    profile, store, parent = setup(tmp_path, OOM_WITH_STRAY)
    child = RunRecord(id="20250101-000100-bbbbbb", command=["python", "train.py"], cwd=str(tmp_path),
                      profile=profile.with_train({"micro_batch_size": 2, "gradient_accumulation_steps": 4}).to_dict(),
                      exit_code=1, status="failed", cause="gpu_oom", parent=parent.id, host=socket.gethostname())
    child.observed = observed
    store.create(child)
    store.log_path(child.id).write_text("micro_batch_size = 2\n" + OOM_WITH_STRAY.replace("2.00 GiB", "1.00 GiB"))
    return store, parent, child


def test_the_relaunchs_probe_decides_arrival_over_its_print_and_the_record_keeps_it(tmp_path):
    # The job printed the flag's value, but trained with its own batch of 4 (the probe saw it).
    store, parent, child = _relaunched(tmp_path, {"micro_batch_size": {"value": 4, "how": "input-shape"},
                                                  "max_seq_len": {"value": 16, "how": "input-shape"}})
    arrival = verify_arrival(parent, child, store)
    assert arrival.missing == {"micro_batch_size": "the probe saw the job still train with micro_batch_size = 4, not 2"}
    assert store.load(child.id).arrival["source"] == {"micro_batch_size": "probe"}


def test_without_the_probe_the_print_decides(tmp_path):
    store, parent, child = _relaunched(tmp_path, None)
    verify_arrival(parent, child, store)
    assert store.load(child.id).arrival == {"missing": {}, "confirmed": ["micro_batch_size"],
                                            "source": {"micro_batch_size": "echo"}}
