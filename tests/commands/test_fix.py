"""`gpudoc fix`: sources (records, logs, stdin, several), the JSON contract, text, exit codes."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gpudoc.commands.fix import fix
from gpudoc.errors import InputError, UsageError
from gpudoc.profiles.loader import load_profile_file
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from tests.conftest import captured_workspace, gpudoc_cli

DIAGNOSIS_KEYS = {
    "cause", "backend", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
    "reserved_unallocated_bytes", "other_processes", "gpu_index", "rank", "exit_code", "summary",
}
SUGGESTION_KEYS = {"rung", "changes", "env", "semantic", "expected_saving_bytes", "why"}

OOM = (
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 23.68 GiB of which 1.50 GiB is free. Process 999 has 4.00 GiB memory in use. Including "
    "non-PyTorch memory, this process has 18.10 GiB memory in use. Of the allocated memory 17.20 GiB is "
    "allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.\n"
)
NCCL = (
    "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600291 "
    "milliseconds before timing out.\n"
)
PROFILE = """\
[train]
micro_batch_size = 4              # per GPU
gradient_accumulation_steps = 8
max_seq_len = 2048

[launch]
nproc_per_node = 2
"""


def call(*, stdin: str = "", cwd: Path | None = None, store: RunStore | None = None, **kwargs) -> tuple[int, str]:
    ws = captured_workspace(cwd, stdin=stdin, environ={"GPUDOC_HOME": str(store.home)} if store else None)
    status = fix(ws, **kwargs)
    return status, ws.console.out.getvalue()


def write_profile(tmp: Path) -> Path:
    path = tmp / "gpudoc.toml"
    path.write_text(PROFILE)
    return path


def make_record(tmp: Path, run_id: str, log: str, *, exit_code=1, status="failed", peak=None, gpus=None,
                profile_path: Path | None = None, parent=None, trial_of=None) -> RunRecord:
    store = RunStore(tmp / ".gpudoc")
    profile = load_profile_file(profile_path).to_dict() if profile_path else None
    record = RunRecord(id=run_id, command=["python", "train.py"], cwd=str(tmp), profile=profile,
                       exit_code=exit_code, status=status, peak_memory_bytes=peak or {}, gpus=gpus or [],
                       parent=parent, host=socket.gethostname(), trial_of=trial_of)
    store.create(record)
    store.log_path(run_id).write_text(log)
    return record


def test_json_contract_keys_pinned(tmp_path):
    write_profile(tmp_path)
    (tmp_path / "oom.log").write_text(OOM)
    status, out = call(logs=["oom.log"], as_json=True, cwd=tmp_path)
    payload = json.loads(out)
    assert status == 0
    assert {"diagnosis", "suggestions"} <= set(payload)
    assert set(payload["diagnosis"]) >= DIAGNOSIS_KEYS
    assert payload["suggestions"] and all(set(s) == SUGGESTION_KEYS for s in payload["suggestions"])
    d = payload["diagnosis"]
    assert (d["cause"], d["rank"], d["gpu_index"], d["requested_bytes"]) == ("gpu_oom", 1, 1, 2 * 1024**3)
    assert d["other_processes"] == [{"pid": 999, "bytes": 4 * 1024**3}]
    first = payload["suggestions"][0]
    assert first["rung"] == "expandable-segments"
    assert [s["rung"] for s in payload["suggestions"]][1] == "free-stray-memory"


def test_latest_run_record_is_the_default_and_its_profile_is_used(tmp_path):
    profile = write_profile(tmp_path)
    make_record(tmp_path, "20250101-000000-aaaaaa", NCCL, profile_path=profile)
    make_record(tmp_path, "20250101-000001-bbbbbb", OOM, profile_path=profile)
    _status, out = call(as_json=True, cwd=tmp_path)
    payload = json.loads(out)
    assert payload["run_id"] == "20250101-000001-bbbbbb"
    assert payload["profile"] == str(profile)
    halve = next(s for s in payload["suggestions"] if s["rung"] == "halve-micro-batch")
    assert halve["changes"] == {"micro_batch_size": [4, 2], "gradient_accumulation_steps": [8, 16]}


def test_a_tune_trial_is_not_taken_for_the_run_to_fix(tmp_path):
    profile = write_profile(tmp_path)
    make_record(tmp_path, "20250101-000000-aaaaaa", OOM, profile_path=profile)
    make_record(tmp_path, "20250101-000001-bbbbbb", OOM, profile_path=profile, trial_of="20250101-000001-tttttt")
    ws = captured_workspace(tmp_path)
    with pytest.raises(InputError, match=r"latest run 20250101-000001-bbbbbb is a trial of `gpudoc tune` "
                                         r"20250101-000001-tttttt.*`gpudoc fix RUN_ID`"):
        fix(ws)
    # Named, the trial is diagnosed like any run.
    status, out = call(targets=["20250101-000001-bbbbbb"], as_json=True, cwd=tmp_path)
    assert status == 0 and json.loads(out)["diagnosis"]["cause"] == "gpu_oom"


def test_run_id_prefix_selects_a_record(tmp_path):
    profile = write_profile(tmp_path)
    make_record(tmp_path, "20250101-000000-aaaaaa", OOM, profile_path=profile)
    make_record(tmp_path, "20250101-000001-bbbbbb", NCCL, profile_path=profile)
    status, out = call(targets=["20250101-000000"], as_json=True, cwd=tmp_path)
    assert status == 0 and json.loads(out)["diagnosis"]["cause"] == "gpu_oom"


def test_stdin_log(tmp_path):
    write_profile(tmp_path)
    status, out = call(targets=["-"], stdin=OOM, as_json=True, cwd=tmp_path)
    assert status == 0 and json.loads(out)["source"] == "<stdin>"


def test_not_memory_related_exits_1_and_still_explains(tmp_path):
    write_profile(tmp_path)
    (tmp_path / "nccl.log").write_text(NCCL)
    status, out = call(logs=["nccl.log"], cwd=tmp_path)
    assert status == 1
    assert out.startswith("Rank 0 hit a collective timeout (SeqNum=1, OpType=ALLREDUCE")
    assert "not a GPU memory failure" in out
    status, out = call(logs=["nccl.log"], as_json=True, cwd=tmp_path)
    payload = json.loads(out)
    assert payload["suggestions"] == [] and payload["diagnosis"]["cause"] == "nccl_timeout"


def test_exhausted_ladder_exits_1(tmp_path):
    (tmp_path / "gpudoc.toml").write_text(
        '[env]\nPYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"\n[train]\nmicro_batch_size = 1\nmax_seq_len = 512\n')
    (tmp_path / "oom.log").write_text(OOM.replace("Process 999 has 4.00 GiB memory in use. ", ""))
    status, out = call(logs=["oom.log"], cwd=tmp_path)
    assert status == 1
    assert "non-semantic ladder is exhausted" in out and "shorter-sequences" in out


def test_text_output_diff_lines_and_saving(tmp_path):
    write_profile(tmp_path)
    (tmp_path / "oom.log").write_text(OOM)
    _status, out = call(logs=["oom.log"], cwd=tmp_path)
    lines = out.splitlines()
    # The one sentence of the diagnosis (the same words the run's summary and the record hold),
    # then the allocator's own figures.
    assert lines[0] == ("Rank 1 ran out of CUDA memory on GPU 1: it asked for 2.0 GiB with 1.5 GiB free of 23.7 GiB; "
                        "another process holds 4.0 GiB on it, which is the real problem.")
    assert lines[1].strip() == "17.2 GiB allocated by PyTorch; 300.0 MiB reserved but unallocated; other processes: PID 999 4.0 GiB"
    assert any(line.strip() == "micro_batch_size             4 → 2" for line in lines)
    assert any(line.strip() == "gradient_accumulation_steps  8 → 16" for line in lines)
    assert "gpudoc clean --gpus 1" in out
    assert "Held back" in out and "max_seq_len  2048 → 1536" in out


def test_apply_writes_first_profile_change(tmp_path):
    profile = write_profile(tmp_path)
    (tmp_path / "oom.log").write_text(OOM.replace("Process 999 has 4.00 GiB memory in use. ", ""))
    (tmp_path / "gpudoc.toml").write_text(PROFILE + '\n[env]\nPYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"\n')
    _status, out = call(logs=["oom.log"], apply=True, as_json=True, cwd=tmp_path)
    payload = json.loads(out)
    assert payload["applied"]["rung"] == "halve-micro-batch"
    assert "micro_batch_size = 2              # per GPU" in profile.read_text()
    assert Path(payload["applied"]["backup"]).exists()


def test_apply_with_strays_covering_the_shortfall_writes_nothing(tmp_path):
    profile = write_profile(tmp_path)
    (tmp_path / "oom.log").write_text(OOM)
    (tmp_path / "gpudoc.toml").write_text(PROFILE + '\n[env]\nPYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"\n')
    before = profile.read_text()
    status, out = call(logs=["oom.log"], apply=True, cwd=tmp_path)
    assert status == 0
    assert profile.read_text() == before
    assert "nothing written" in out and "gpudoc clean --gpus 1" in out


def test_several_logs_name_the_first_real_failure(tmp_path):
    write_profile(tmp_path)
    (tmp_path / "node0.log").write_text(NCCL)
    (tmp_path / "node1.log").write_text(OOM)
    status, out = call(logs=["node0.log", "node1.log"], as_json=True, cwd=tmp_path)
    payload = json.loads(out)
    assert status == 0
    assert payload["source"] == "node1.log"
    assert payload["diagnosis"]["cause"] == "gpu_oom"
    assert [s["cause"] for s in payload["sources"]] == ["nccl_timeout", "gpu_oom"]


def test_successful_run_gets_the_upward_rung(tmp_path):
    profile = write_profile(tmp_path)
    make_record(tmp_path, "20250101-000000-aaaaaa", "step 1 loss 2.0\n", exit_code=0, status="ok",
                peak={"0": 3 * 1024**3, "1": 3 * 1024**3},
                gpus=[{"index": 0, "name": "NVIDIA A10G", "total_bytes": 24 * 1024**3}], profile_path=profile)
    status, out = call(as_json=True, cwd=tmp_path)
    payload = json.loads(out)
    assert status == 0
    up = payload["suggestions"][0]
    assert up["rung"] == "raise-micro-batch"
    old_m, new_m = up["changes"]["micro_batch_size"]
    old_a, new_a = up["changes"]["gradient_accumulation_steps"]
    assert new_m > old_m and new_m * new_a == old_m * old_a


def test_no_records_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no run records"):
        call(cwd=tmp_path)


def test_rerun_needs_a_record(tmp_path):
    (tmp_path / "oom.log").write_text(OOM)
    with pytest.raises(UsageError, match="--rerun needs a run record"):
        call(logs=["oom.log"], rerun=True, cwd=tmp_path)


def test_cli_exit_codes_and_errors(tmp_path):
    write_profile(tmp_path)
    (tmp_path / "oom.log").write_text(OOM)
    (tmp_path / "nccl.log").write_text(NCCL)
    assert gpudoc_cli("fix", "--log", "oom.log", cwd=tmp_path).returncode == 0
    assert gpudoc_cli("fix", "--log", "nccl.log", cwd=tmp_path).returncode == 1
    missing = gpudoc_cli("fix", "--log", "nope.log", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.log" in missing.stderr and "Traceback" not in missing.stderr
    piped = gpudoc_cli("fix", "-", "--json", cwd=tmp_path, input=OOM)
    assert piped.returncode == 0 and json.loads(piped.stdout)["diagnosis"]["rank"] == 1
    bad = gpudoc_cli("fix", "--bogus", cwd=tmp_path)
    assert bad.returncode == 2
    helped = gpudoc_cli("fix", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "gpudoc fix --log train.log" in helped.stdout


def test_latest_within_one_second_follows_the_retry_chain(tmp_path):
    profile = write_profile(tmp_path)
    # Same second; the child's random suffix sorts before its parent's.
    make_record(tmp_path, "20250101-000000-ffffff", OOM, profile_path=profile)
    make_record(tmp_path, "20250101-000000-000000", NCCL, profile_path=profile, parent="20250101-000000-ffffff")
    _status, out = call(as_json=True, cwd=tmp_path)
    assert json.loads(out)["run_id"] == "20250101-000000-000000"


@pytest.mark.parametrize("content, why", [
    (b"", "it is empty"),
    (b"\n  \n", "it is empty"),
    (bytes(range(256)) * 64, "no text lines in it"),
    (b"\x00" * 100_000, "no text lines in it"),
])
def test_a_log_with_no_log_lines_is_nothing_recognisable_never_success(tmp_path, content, why):
    (tmp_path / "given.log").write_bytes(content)
    done = gpudoc_cli("fix", "--log", "given.log", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith(f"gpudoc: given.log: nothing recognisable in it: {why}")
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""
    piped = gpudoc_cli("fix", "-", cwd=tmp_path, input=content.decode("latin-1"))
    assert piped.returncode == 2 and "<stdin>: nothing recognisable" in piped.stderr


def test_a_text_log_without_a_failure_does_not_claim_the_run_succeeded(tmp_path):
    (tmp_path / "given.log").write_text("epoch 1 done\nepoch 2 done\n")
    done = gpudoc_cli("fix", "--log", "given.log", cwd=tmp_path)
    assert done.returncode == 1
    assert "no failure was found in the log" in done.stdout and "did not fail" not in done.stdout



def test_a_utf16_log_as_powershell_writes_it_is_read(tmp_path):
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
           "of 23.68 GiB of which 1.12 GiB is free.\n")
    (tmp_path / "ps.log").write_bytes(("step 1\n" + oom).encode("utf-16"))  # with its byte-order mark
    done = gpudoc_cli("fix", "--log", "ps.log", "--json", cwd=tmp_path)
    diagnosis = json.loads(done.stdout)["diagnosis"]
    assert diagnosis["cause"] == "gpu_oom" and diagnosis["requested_bytes"] == 2 * 1024**3

def test_an_early_failure_buried_under_a_flood_is_still_found(tmp_path):
    # The OOM is 6 MB from the end: far outside the tail, found by the streaming scan.
    oom = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
           "capacity of 23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is allocated by "
           "PyTorch, and 341.25 MiB is reserved by PyTorch but unallocated.\n")
    noise = "".join(f"[rank0]: waiting for rank 1 step {i} lr 3e-04 it/s 7.1\n" for i in range(120_000))
    (tmp_path / "flood.log").write_text("starting\n" + oom + noise)
    done = gpudoc_cli("fix", "--log", "flood.log", "--json", cwd=tmp_path)
    diagnosis = json.loads(done.stdout)["diagnosis"]
    assert diagnosis["cause"] == "gpu_oom" and diagnosis["rank"] == 1
    assert diagnosis["requested_bytes"] == 2 * 1024**3
