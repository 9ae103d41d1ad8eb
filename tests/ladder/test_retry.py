"""One --retry-oom step: diagnose the record, pick the first profile-changing rung, write, reload."""

from __future__ import annotations

import socket

from gpudoc.ladder.retry import job_python, next_attempt, record_diagnosis
from gpudoc.profiles.loader import load_profile_file
from gpudoc.runs.store import RunRecord, RunStore

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
    profile, store, record = setup(tmp_path, OOM_WITH_STRAY)
    new_profile, rung = next_attempt(record, profile, allow_semantic=False, store=store, cwd=tmp_path)
    assert rung.rung == "halve-micro-batch"
    assert new_profile.knobs["micro_batch_size"] == 2 and new_profile.knobs["gradient_accumulation_steps"] == 4
    assert (tmp_path / "gpudoc.toml").read_text().startswith("# keep me\n")
    assert "micro_batch_size = 2  # per GPU" in (tmp_path / "gpudoc.toml").read_text()


def test_record_without_diagnosis_is_diagnosed_from_its_log(tmp_path):
    profile, store, record = setup(tmp_path, OOM_WITH_STRAY)
    diag = record_diagnosis(record, store)
    assert diag["cause"] == "gpu_oom" and diag["requested_bytes"] == 2 * 1024**3


def test_stored_diagnosis_wins_and_non_memory_failure_gives_nothing(tmp_path):
    profile, store, record = setup(tmp_path, OOM_WITH_STRAY, diagnosis={"cause": "host_oom", "summary": "Killed"})
    assert next_attempt(record, profile, allow_semantic=True, store=store, cwd=tmp_path) == (None, None)
    assert (tmp_path / "gpudoc.toml").read_text() == PROFILE


def test_exhausted_ladder_gives_nothing(tmp_path):
    profile, store, record = setup(tmp_path, OOM_WITH_STRAY.replace("Process 999 has 6.00 GiB memory in use. ", ""))
    (tmp_path / "gpudoc.toml").write_text(PROFILE.replace("micro_batch_size = 4", "micro_batch_size = 1"))
    profile = load_profile_file(tmp_path / "gpudoc.toml")
    assert next_attempt(record, profile, allow_semantic=False, store=store, cwd=tmp_path) == (None, None)


def test_job_python_follows_the_command(tmp_path):
    import sys

    script = tmp_path / "torchrun"
    script.write_text(f"#!{sys.executable}\nprint()\n")
    script.chmod(0o755)
    record = RunRecord(id="x", command=[str(script), "train.py"], cwd=str(tmp_path))
    assert job_python(record) == sys.executable
    record.command = [sys.executable, "train.py"]
    assert job_python(record) == sys.executable
