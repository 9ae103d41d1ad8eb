"""End to end on the CPU: a real job that reads its knobs from the environment and prints a
real-format OOM while its micro batch is too big; gpudoc walks the ladder down until it fits."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from gpudoc.runs.store import RunStore
from tests.conftest import gpudoc_cli

JOB = Path(__file__).with_name("oom_job.py")

PROFILE = """\
# The job on one 16 GB card.
description = "e2e: knobs through GPUDOC_* variables"

[train]
micro_batch_size = 16              # per device
gradient_accumulation_steps = 2    # global 32
max_seq_len = 1024                 # semantic: never touched without permission

[bind]
env = true                         # GPUDOC_MICRO_BATCH_SIZE, ...
"""


def _chain(store: RunStore) -> list:
    records = {r.id: r for r in store.records()}
    children = {r.parent: r for r in records.values()}
    head = children.get(None)
    chain = []
    while head is not None:
        chain.append(head)
        head = children.get(head.id)
    assert len(chain) == len(records), "every record is in one parent chain"
    return chain


def _check_final_profile(text: str) -> None:
    assert "micro_batch_size = 2              # per device" in text
    assert "gradient_accumulation_steps = 16    # global 32" in text
    assert "# The job on one 16 GB card." in text and "max_seq_len = 1024                 # semantic" in text
    assert "env = true                         # GPUDOC_MICRO_BATCH_SIZE, ..." in text
    assert "expandable_segments:True" in text


def test_run_retry_oom_walks_down_until_the_job_fits(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(PROFILE)
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "6", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _check_final_profile((tmp_path / "gpudoc.toml").read_text())
    chain = _chain(RunStore(tmp_path / ".gpudoc"))
    knobs = [(r.profile["knobs"]["micro_batch_size"], r.profile["knobs"]["gradient_accumulation_steps"]) for r in chain]
    # The OOM's 102 MiB reserved-but-unallocated cannot cover its shortfall: expandable segments ride
    # with the first halving instead of costing a relaunch; the global batch stays 32 throughout.
    assert knobs == [(16, 2), (8, 4), (4, 8), (2, 16)]
    assert "expandable_segments:True" in chain[1].env_set.get("PYTORCH_ALLOC_CONF", "")
    assert [r.cause for r in chain] == ["gpu_oom"] * 3 + ["ok"]
    assert all(m * a == 32 for m, a in knobs)


def test_fix_apply_in_a_loop_reaches_the_same_profile(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(PROFILE)
    command = ("run", "--no-check", "--", sys.executable, "train.py")
    done = gpudoc_cli(*command, cwd=tmp_path)
    applied = []
    while done.returncode != 0:
        assert len(applied) < 6
        fixed = gpudoc_cli("fix", "--json", "--apply", cwd=tmp_path)
        assert fixed.returncode == 0, fixed.stderr
        payload = json.loads(fixed.stdout)
        assert payload["applied"]["path"] == str(tmp_path / "gpudoc.toml")
        applied.append(payload["applied"]["rung"])
        done = gpudoc_cli(*command, cwd=tmp_path)
    assert applied == ["expandable-segments+halve-micro-batch", "halve-micro-batch", "halve-micro-batch"]
    _check_final_profile((tmp_path / "gpudoc.toml").read_text())
    records = list(RunStore(tmp_path / ".gpudoc").records())
    assert sorted(r.profile["knobs"]["micro_batch_size"] for r in records) == [2, 4, 8, 16]
    assert [r.cause for r in records if r.profile["knobs"]["micro_batch_size"] == 2] == ["ok"]


def test_fix_rerun_relaunches_with_the_recorded_switches_and_links_the_child(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(PROFILE.replace("micro_batch_size = 16", "micro_batch_size = 4").replace("= 2    # global 32", "= 8    # global 32"))
    (tmp_path / "gpudoc.toml").write_text((tmp_path / "gpudoc.toml").read_text() + "\n[env]\nPYTORCH_CUDA_ALLOC_CONF = \"expandable_segments:True\"\n")
    # --no-check: this machine has no GPU, so the pre-flight would refuse; the relaunch must launch
    # the way this run was launched, not re-run a pre-flight the user skipped.
    first = gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path)
    assert first.returncode == 1
    store = RunStore(tmp_path / ".gpudoc")
    [failed] = store.records()
    assert failed.run_switches == ["--no-check"]
    done = gpudoc_cli("fix", "--rerun", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Relaunching in {tmp_path}: gpudoc run -p " in done.stdout and " --no-check -- " in done.stdout
    text = (tmp_path / "gpudoc.toml").read_text()
    assert "micro_batch_size = 2" in text and "gradient_accumulation_steps = 16" in text
    chain = _chain(store)
    assert next(r.id for r in chain) == failed.id
    child = chain[1]
    assert child.parent == failed.id
    assert child.run_switches == ["-p", str(tmp_path / "gpudoc.toml"), "--no-check"]
    assert [r.profile["knobs"]["micro_batch_size"] for r in chain] == [4, 2]
    assert child.env_set["GPUDOC_MICRO_BATCH_SIZE"] == "2" and child.cause == "ok" and child.exit_code == 0
    assert "micro_batch_size=2 gradient_accumulation_steps=16" in store.log_path(child.id).read_text()


def test_fix_rerun_exits_with_the_relaunch_status(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(PROFILE + "\n[env]\nPYTORCH_CUDA_ALLOC_CONF = \"expandable_segments:True\"\n")
    first = gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path)
    assert first.returncode == 1
    # 16 -> 8 still does not fit: the relaunch fails again, and fix says so through its status.
    done = gpudoc_cli("fix", "--rerun", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    # stdout opens with the one JSON object (the relaunched job's own output follows it).
    payload, _end = json.JSONDecoder().raw_decode(done.stdout)
    assert payload["applied"]["rung"] == "halve-micro-batch"
    assert payload["rerun"]["command"] == ["gpudoc", "run", "-p", str(tmp_path / "gpudoc.toml"), "--no-check", "--",
                                           sys.executable, "train.py"]
    assert "Relaunching in " in done.stderr and ": gpudoc run -p" in done.stderr
    chain = _chain(RunStore(tmp_path / ".gpudoc"))
    assert [(r.profile["knobs"]["micro_batch_size"], r.cause) for r in chain] == [(16, "gpu_oom"), (8, "gpu_oom")]
    assert chain[1].parent == chain[0].id


def test_a_second_apply_on_one_failed_run_writes_nothing_and_rerun_then_launches_it(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(PROFILE + "\n[env]\nPYTORCH_CUDA_ALLOC_CONF = \"expandable_segments:True\"\n")
    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path).returncode == 1
    first = gpudoc_cli("fix", "--apply", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    after_first = (tmp_path / "gpudoc.toml").read_text()
    assert "micro_batch_size = 8" in after_first
    # The same failed run again: the rung is written, only not tried; halving again would stack a
    # rung nobody has tried.
    second = gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    body = json.loads(second.stdout)
    assert body["applied"] is None
    assert any(n.startswith("nothing written: halve-micro-batch is already in") and
               "not yet tried; `gpudoc fix --rerun" in n for n in body["notes"])
    assert (tmp_path / "gpudoc.toml").read_text() == after_first
    assert (tmp_path / "gpudoc.toml.gpudoc.bak").read_text().count("micro_batch_size = 16") == 1
    # --rerun after --apply relaunches what is there, without a second rung.
    rerun = gpudoc_cli("fix", "--rerun", cwd=tmp_path)
    assert "Relaunching in" in rerun.stdout, rerun.stdout + rerun.stderr
    assert (tmp_path / "gpudoc.toml").read_text() == after_first
    knobs = sorted(r.profile["knobs"]["micro_batch_size"] for r in RunStore(tmp_path / ".gpudoc").records())
    assert knobs == [8, 16]


def test_apply_after_a_hand_edit_not_yet_run_is_refused(tmp_path):
    shutil.copy(JOB, tmp_path / "train.py")
    (tmp_path / "gpudoc.toml").write_text(PROFILE)
    assert gpudoc_cli("run", "--no-check", "--", sys.executable, "train.py", cwd=tmp_path).returncode == 1
    edited = PROFILE.replace("micro_batch_size = 16", "micro_batch_size = 12")
    (tmp_path / "gpudoc.toml").write_text(edited)
    refused = gpudoc_cli("fix", "--apply", cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert f"{tmp_path / 'gpudoc.toml'} changed since run" in refused.stderr
    assert "train.micro_batch_size: 16 -> 12" in refused.stderr
    assert (tmp_path / "gpudoc.toml").read_text() == edited
