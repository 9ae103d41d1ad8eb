"""The one workspace: built at the CLI boundary, the only source of the runs directory, the latest
run and a profile's history for every command."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpudoc.cli.main import run_cli
from gpudoc.profiles.loader import load_profile_file
from gpudoc.profiles.model import EMPTY
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from tests.conftest import captured_workspace

PROFILE = """
[train]
micro_batch_size = 2
max_seq_len = 2048
precision = "bf16-true"

[model]
layers = 32
hidden = 4096
heads = 32
ffn = 11008
vocab = 32000
"""


def test_commands_use_the_workspace_they_are_given_not_the_process(tmp_path):
    # The process's own directory and environment say nothing about these runs.
    home = tmp_path / "team-home"
    store = RunStore(home)
    store.create(RunRecord(id="20250101-000000-aaaaaa", command=["python", "train.py"], cwd=str(tmp_path),
                           status="ok", exit_code=0))
    ws = captured_workspace(tmp_path / "project", environ={"GPUDOC_HOME": str(home)})
    assert "GPUDOC_HOME" not in os.environ
    assert run_cli(["gpudoc", "runs", "--json"], workspace=ws) == 0
    doc = json.loads(ws.console.out.getvalue())
    assert [r["id"] for r in doc["runs"]] == ["20250101-000000-aaaaaa"]
    assert doc["runs_dir"] == str(home / "runs")


def test_logs_and_fix_pick_the_same_run_of_a_retry_chain(tmp_path):
    store = RunStore(tmp_path / ".gpudoc")
    # Same second: the child's random suffix sorts first, the parent's id is the last one.
    for run_id, parent, text in (("20250101-000000-ffffff", None, "parent's output\n"),
                                 ("20250101-000000-000000", "20250101-000000-ffffff", "child's output\n")):
        store.create(RunRecord(id=run_id, command=["python", "t.py"], cwd=str(tmp_path), parent=parent,
                               status="failed", exit_code=1))
        store.log_path(run_id).write_text(text)
    out = tmp_path / "logs.out"
    ws = captured_workspace(tmp_path)
    with open(out, "w") as handle:
        from gpudoc.commands.logs import logs

        logs(ws, out_fd=handle.fileno())
    assert out.read_text() == "child's output\n"
    ws = captured_workspace(tmp_path)
    run_cli(["gpudoc", "fix", "--json"], workspace=ws)
    assert json.loads(ws.console.out.getvalue())["run_id"] == "20250101-000000-000000"


def test_a_derived_workspace_keeps_its_run_store(tmp_path):
    ws = captured_workspace(tmp_path / "a")
    moved = ws.but(cwd=tmp_path / "b")
    assert moved.cwd == tmp_path / "b" and moved.store is ws.store
    assert moved.console is ws.console and moved.environ == ws.environ
    quiet = ws.but(console=captured_workspace().console)
    assert quiet.store is ws.store and quiet.cwd == ws.cwd and quiet.console is not ws.console


def test_history_of_no_profile_is_only_the_run_itself(tmp_path):
    ws = captured_workspace(tmp_path)
    ws.store.create(RunRecord(id="20250101-000000-aaaaaa", command=["x"], cwd=str(tmp_path), profile={"name": "(none)"}))
    run = RunRecord(id="20250101-000001-bbbbbb", command=["x"], cwd=str(tmp_path))
    assert ws.history(EMPTY) == []
    assert ws.history(EMPTY, upto=run) == [run]


def test_history_of_a_tier_read_with_a_command_is_that_commands_runs(tmp_path):
    """Many jobs run under one GPU tier: one job's peaks and tried rungs are not another's."""
    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command

    ws = captured_workspace(tmp_path)
    tier = load_profile("gpu-24gb", tmp_path)
    mine, other = ["python", "a.py", "--per_device_train_batch_size", "8"], ["python", "b.py"]
    for n, command in enumerate((mine, other, mine)):
        ws.store.create(RunRecord(id=f"20250101-00000{n}-aaaaaa", command=command, cwd=str(tmp_path),
                                  profile={"name": "gpu-24gb", "path": str(tier.path)}))
    assert len(ws.history(tier)) == 3  # the tier alone: every run under it, as before
    job = with_command(tier, mine, tmp_path)
    assert [r.id for r in ws.history(job)] == ["20250101-000000-aaaaaa", "20250101-000002-aaaaaa"]


def test_estimate_learns_from_the_profiles_measured_runs(tmp_path):
    path = tmp_path / "gpudoc.toml"
    path.write_text(PROFILE)
    profile = load_profile_file(path)
    ws = captured_workspace(tmp_path)
    plain = ws.estimate(profile, None)
    assert plain is not None and plain.source == "formula"
    ws.store.create(RunRecord(id="20250101-000000-aaaaaa", command=["x"], cwd=str(tmp_path), status="ok", exit_code=0,
                              profile={"name": "gpudoc", "path": str(path), "knobs": profile.knobs},
                              peak_memory_bytes={"0": 70 * 1024**3}))
    corrected = ws.estimate(profile, None)
    assert corrected.source == "formula corrected by 1 measured run"
    assert corrected.peak_bytes > plain.peak_bytes
    assert ws.estimate(load_profile_file(_without_model(tmp_path)), None) is None


def _without_model(tmp_path: Path) -> Path:
    path = tmp_path / "plain.toml"
    path.write_text("[train]\nmicro_batch_size = 2\n")
    return path
