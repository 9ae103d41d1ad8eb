"""One owner applies the next rung and relaunches: `fix --json` says under ``next`` what `fix --apply`
then writes, `run --retry-oom` takes the rung `fix` proposes for the same chain (the same facts,
the chain's evidence included), and both write under the one edit lock."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpudoc.runs.store import RunStore
from tests.conftest import REPO, gpudoc_cli

# Seed 004's OOM, the same whatever the batch: the memory that fills the card is not the activations'.
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
       "15.57 GiB of which 2.44 MiB is free. Including non-PyTorch memory, this process has 15.56 GiB memory in "
       "use. Of the allocated memory 15.27 GiB is allocated by PyTorch, and 164.52 MiB is reserved by PyTorch but "
       "unallocated.\n")
JOB = f"""\
import os, sys
print("micro_batch_size=" + os.environ["GPUDOC_MICRO_BATCH_SIZE"], flush=True)
sys.stderr.write({OOM!r})
sys.exit(1)
"""
PROFILE = """\
[train]
micro_batch_size = 4
gradient_accumulation_steps = 4
max_seq_len = 1024
gradient_checkpointing = true
precision = "fp16"
offload_optimizer = false

[bind]
env = true
"""
NANOGPT = Path(__file__).with_name("jobs") / "nanogpt_config.py"


def _job(cwd: Path) -> Path:
    cwd.mkdir(exist_ok=True)
    (cwd / "train.py").write_text(JOB)
    (cwd / "gpudoc.toml").write_text(PROFILE)
    return cwd


def _records(cwd: Path) -> list:
    return sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")


def _retry(cwd: Path, times: int) -> subprocess.CompletedProcess:
    return gpudoc_cli("run", "--no-check", "--retry-oom", str(times), "--", sys.executable, "train.py", cwd=cwd)


def test_fix_and_retry_oom_take_the_same_next_rung_from_the_same_chain(tmp_path):
    # The allocator setting, then 4 -> 2, which the job printed and which left the OOM as it was.
    seen = _job(tmp_path / "seen")
    assert _retry(seen, 2).returncode == 1
    first, _alloc, halved = _records(seen)
    assert (first.knobs["micro_batch_size"], halved.knobs["micro_batch_size"]) == (4, 2)
    assert halved.arrival == {"missing": {}, "confirmed": ["micro_batch_size"], "source": {"micro_batch_size": "echo"}}
    body = json.loads(gpudoc_cli("fix", "--json", halved.id, cwd=seen).stdout)
    # Not 2 -> 1: the halving arrived and the OOM did not move.
    assert body["next"] == {"rungs": ["offload-optimizer"], "changes": {"offload_optimizer": [False, True]},
                            "env": {}, "files": [str(seen / "gpudoc.toml")], "argv": None}
    why = (f"micro_batch_size 4 -> 2 reached the job in run {halved.id} and the out-of-memory error stayed the "
           "same (asked for 2.0 MiB with 15.3 GiB allocated): the memory is not in the activations")
    assert {"rung": "halve-micro-batch", "reason": f"{why}; halve-micro-batch acts on the activations"} in body["skipped"]
    said = gpudoc_cli("fix", halved.id, cwd=seen).stdout
    assert f"  halve-micro-batch: {why}" in said  # the reason in the text, not only in the JSON

    # --retry-oom over the same chain, one relaunch further: the rung fix proposed.
    again = _job(tmp_path / "again")
    assert _retry(again, 3).returncode == 1
    runs = _records(again)
    assert len(runs) == 4
    moved = {k: [runs[2].knobs.get(k), v] for k, v in runs[3].knobs.items() if runs[2].knobs.get(k) != v}
    assert moved == body["next"]["changes"]


def test_next_is_what_apply_then_writes_to_the_profile(tmp_path):
    _job(tmp_path)
    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path).returncode == 1
    planned = json.loads(gpudoc_cli("fix", "--json", cwd=tmp_path).stdout)["next"]
    assert planned["rungs"] == ["expandable-segments"] and planned["files"] == [str(tmp_path / "gpudoc.toml")]
    applied = json.loads(gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path).stdout)
    assert applied["next"] == planned and applied["applied"]["path"] == planned["files"][0]
    text = (tmp_path / "gpudoc.toml").read_text()
    for var, value in planned["env"].items():
        assert f'{var} = "{value}"' in text


def test_next_is_what_apply_then_writes_to_the_jobs_config_file(tmp_path):
    shutil.copy(NANOGPT, tmp_path / "train.py")
    (tmp_path / "cfg.py").write_text("batch_size = 32\n")
    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", "cfg.py", cwd=tmp_path).returncode == 1
    planned = json.loads(gpudoc_cli("fix", "--json", cwd=tmp_path).stdout)["next"]
    assert planned["rungs"] == ["expandable-segments", "halve-micro-batch"]  # one relaunch, as the text says
    assert planned["changes"]["micro_batch_size"] == [32, 16]
    assert planned["files"] == [str(tmp_path / "cfg.py")] and planned["argv"] is None
    applied = json.loads(gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path).stdout)["applied"]
    assert applied["files"] == planned["files"] and applied["env"] == planned["env"]
    assert (tmp_path / "cfg.py").read_text() == "batch_size = 16\n"


def test_next_gives_the_new_command_line_when_flags_change(tmp_path):
    shutil.copy(NANOGPT, tmp_path / "train.py")
    command = [sys.executable, "train.py", "--batch_size=32"]
    assert gpudoc_cli("run", "--no-check", "--", *command, cwd=tmp_path).returncode == 1
    planned = json.loads(gpudoc_cli("fix", "--json", cwd=tmp_path).stdout)["next"]
    assert planned["argv"] == [sys.executable, "train.py", "--batch_size=16"] and planned["files"] == []
    applied = json.loads(gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path).stdout)
    assert applied["applied"]["command"] == planned["argv"]


class _Held:
    """gpudoc's edit lock on a directory, held by this test (an flock on the directory itself)."""

    def __init__(self, directory: Path) -> None:
        self.fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        os.close(self.fd)


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "gpudoc", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _waits_for_the_lock(proc: subprocess.Popen, cwd: Path) -> None:
    """``proc`` opened the directory to lock it (gpudoc's edit lock is an flock on the directory
    itself), and while this test holds the lock it writes nothing."""
    deadline = time.monotonic() + 60
    while not _opened(proc.pid, cwd) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(1.0)
    assert proc.poll() is None, proc.communicate()
    assert (cwd / "gpudoc.toml").read_text() == PROFILE


def _opened(pid: int, directory: Path) -> bool:
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:  # gone, or a descriptor closed between the listing and the reading
        return False
    return str(directory) in links


def test_apply_waits_for_the_edit_lock(tmp_path):
    _job(tmp_path)
    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path).returncode == 1
    held = _Held(tmp_path)
    proc = _start(tmp_path, "fix", "--apply")
    try:
        _waits_for_the_lock(proc, tmp_path)
    finally:
        held.release()
    assert proc.wait(60) == 0, proc.communicate()
    assert "expandable_segments:True" in (tmp_path / "gpudoc.toml").read_text()


def test_retry_oom_writes_its_rung_under_the_same_lock(tmp_path):
    _job(tmp_path)
    held = _Held(tmp_path)
    proc = _start(tmp_path, "run", "--no-check", "--retry-oom", "1", "--", sys.executable, "train.py")
    try:
        _waits_for_the_lock(proc, tmp_path)
        assert len(_records(tmp_path)) == 1  # the relaunch waits for the lock too
    finally:
        held.release()
    assert proc.wait(60) == 1, proc.communicate()
    assert len(_records(tmp_path)) == 2
    assert "expandable_segments:True" in (tmp_path / "gpudoc.toml").read_text()


def test_the_chains_evidence_holds_the_probes_phase_and_breakdown(tmp_path):
    from gpudoc.commands.relaunch import chain_evidence
    from gpudoc.ladder.evidence import Attempt
    from gpudoc.runs.record import RunRecord

    store = RunStore(tmp_path / ".gpudoc")
    held = {"parameters": 1 << 30, "gradients": 1 << 30, "optimizer_states": 2 << 30, "other": 3 << 30}
    first = RunRecord(id="20260101-000000000-aaaaaa", command=["python", "train.py"], cwd=str(tmp_path),
                      status="failed", cause="gpu_oom", profile={"knobs": {"micro_batch_size": 4}},
                      oom={"phase": "backward", "breakdown": held})
    second = RunRecord(id="20260101-000100000-bbbbbb", command=["python", "train.py"], cwd=str(tmp_path),
                       status="failed", cause="gpu_oom", parent=first.id, profile={"knobs": {"micro_batch_size": 2}},
                       arrival={"missing": {}, "confirmed": ["micro_batch_size"]},
                       oom={"phase": "optimizer", "breakdown": dict(held, reserved_unallocated=7)})
    for record in (first, second):
        store.create(record)
    evidence = chain_evidence(second, store)
    assert evidence.phase == "optimizer"
    assert evidence.attempts == (Attempt(second.id, {"micro_batch_size": (4, 2)}, {},
                                         "the probe saw parameters 1.0 GiB, gradients 1.0 GiB, optimizer states "
                                         "2.0 GiB, other 3.0 GiB"),)
    assert "the memory is not in the activations" in evidence.ruled_out()["activations"]
    # Where both OOM messages give the allocator's figures, they decide: the request halved.
    store.log_path(first.id).write_text(OOM.replace("2.00 MiB", "4.00 MiB"))
    store.log_path(second.id).write_text(OOM)
    assert chain_evidence(second, store).attempts[0].unchanged is None


SEED_002_JOB = """\
import os, sys
# Until the user binds it, the job keeps its own batch of 45, whatever gpudoc exports (seed 002).
micro = int(os.environ["GPUDOC_MICRO_BATCH_SIZE"]) if os.environ.get("BOUND") == "1" else 45
print(f"micro_batch_size={micro}", flush=True)
if micro > 15:
    sys.stderr.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.76 GiB. GPU 0 has a total "
                     "capacity of 23.65 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process "
                     "has 22.51 GiB memory in use. Of the allocated memory 20.93 GiB is allocated by PyTorch, and "
                     "1.13 GiB is reserved by PyTorch but unallocated.\\n")
    sys.exit(1)
print("fits")
"""
SEED_002_PROFILE = "[train]\nmicro_batch_size = 45\ngradient_accumulation_steps = 5\n[bind]\nenv = true\n"


def test_seed_002_once_the_knob_is_bound_the_halving_it_never_saw_is_tried(tmp_path):
    (tmp_path / "train.py").write_text(SEED_002_JOB)
    (tmp_path / "gpudoc.toml").write_text(SEED_002_PROFILE)
    stopped = _retry(tmp_path, 3)
    assert stopped.returncode == 1 and "micro_batch_size = 15 did not reach the job" in stopped.stderr
    ignored = _records(tmp_path)[-1]
    assert ignored.knobs["micro_batch_size"] == 15 and "micro_batch_size" in ignored.arrival["missing"]
    # The user binds the knob (the job now reads it) and starts again from the batch of 45.
    (tmp_path / "gpudoc.toml").write_text(SEED_002_PROFILE)
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "3", "--", sys.executable, "train.py", cwd=tmp_path,
                      env={"BOUND": "1"})
    assert done.returncode == 0, done.stderr
    assert "no rung of the ladder is left" not in done.stderr
    assert "halve-micro-batch (micro_batch_size 45 -> 15, gradient_accumulation_steps 5 -> 15)" in done.stderr
    assert _records(tmp_path)[-1].knobs["micro_batch_size"] == 15
