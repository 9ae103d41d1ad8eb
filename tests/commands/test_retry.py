"""One --retry-oom step: diagnose the record, pick the first profile-changing rung, write, reload."""

from __future__ import annotations

import socket

from gpudoc.commands.retry import job_torch_facts, next_attempt, record_diagnosis
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.profiles.loader import load_profile_file
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from tests.conftest import captured_workspace

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


def test_next_attempt_skips_free_stray_memory_and_applies_the_batch_rung(tmp_path):
    profile, _store, record = setup(tmp_path, OOM_WITH_STRAY)
    new_profile, rung = next_attempt(record, profile, captured_workspace(tmp_path), allow_semantic=False)
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
    assert next_attempt(record, profile, captured_workspace(tmp_path), allow_semantic=True) == (None, None)
    assert (tmp_path / "gpudoc.toml").read_text() == PROFILE


def test_exhausted_ladder_gives_nothing(tmp_path):
    profile, _store, record = setup(tmp_path, OOM_WITH_STRAY.replace("Process 999 has 6.00 GiB memory in use. ", ""))
    (tmp_path / "gpudoc.toml").write_text(PROFILE.replace("micro_batch_size = 4", "micro_batch_size = 1"))
    profile = load_profile_file(tmp_path / "gpudoc.toml")
    assert next_attempt(record, profile, captured_workspace(tmp_path), allow_semantic=False) == (None, None)


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
