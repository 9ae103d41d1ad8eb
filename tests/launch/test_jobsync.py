"""Fail-fast across nodes through the shared run directory, and two real "nodes" on this machine."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from gpudoc.launch.jobsync import JobSync
from tests.conftest import gpudoc_cli
from tests.launch.helpers import RANKS, Gpudoc, assert_no_leftovers, job_env, marker, run_dirs


def test_a_marker_reaches_the_other_nodes_once(tmp_path):
    a = JobSync(tmp_path, "slurm-77.0", "run-a", "node-a")
    b = JobSync(tmp_path, "slurm-77.0", "run-b", "node-b")
    assert b.failures_elsewhere() == []
    a.announce("gpu_oom", rank=3, line="CUDA out of memory")
    a.announce("gpu_oom", rank=4, line="again")  # only the first failure is announced
    [seen] = b.failures_elsewhere()
    assert (seen["host"], seen["rank"], seen["run_id"]) == ("node-a", 3, "run-a")
    assert a.failures_elsewhere() == []  # its own marker is not news to it


def test_a_link_planted_in_a_shared_home_is_never_written_through(tmp_path):
    """In a team's GPUDOC_HOME anyone may plant links where a marker (or its temporary file) goes."""
    victim = tmp_path / "victim"
    victim.write_text("PRECIOUS")
    folder = tmp_path / "runs" / ".jobs" / "slurm-42"
    folder.mkdir(parents=True)
    for name in (".run-a.tmp", "run-a.json"):
        (folder / name).symlink_to(victim)
    JobSync(tmp_path / "runs", "slurm-42", "run-a", "node-a").announce("gpu_oom", rank=0, line="OOM")
    assert victim.read_text() == "PRECIOUS"
    written = folder / "run-a.json"
    assert not written.is_symlink() and json.loads(written.read_text())["cause"] == "gpu_oom"
    assert written.stat().st_mode & 0o777 == 0o600


def test_a_new_marker_directory_is_private(tmp_path):
    JobSync(tmp_path, "slurm-43", "run-a", "node-a").announce("gpu_oom", rank=0, line="OOM")
    assert (tmp_path / ".jobs" / "slurm-43").stat().st_mode & 0o777 == 0o700


def test_markers_of_an_earlier_job_with_the_same_id_are_ignored(tmp_path):
    old = JobSync(tmp_path, "rdzv-exp1", "run-old", "n1", started=time.time() - 3600)
    old.announce("gpu_oom", rank=0, line="x")
    marker_file = next((tmp_path / ".jobs" / "rdzv-exp1").glob("*.json"))
    doc = json.loads(marker_file.read_text())
    doc["time"] = time.time() - 3000
    marker_file.write_text(json.dumps(doc))
    new = JobSync(tmp_path, "rdzv-exp1", "run-new", "n2")
    assert new.failures_elsewhere() == []


def test_malformed_markers_are_skipped_and_a_good_one_still_counts(tmp_path):
    node = JobSync(tmp_path, "job-9", "run-b", "node-b")
    other = JobSync(tmp_path, "job-9", "run-a", "node-a")
    other.announce("gpu_oom", rank=1, line="CUDA out of memory")
    folder = tmp_path / ".jobs" / "job-9"
    bad = {
        "list.json": "[1, 2]", "string.json": '"x"', "no-time.json": '{"host": "h"}',
        "nan.json": '{"time": "nan"}', "binary.json": "\udcff", "nested.json": "[" * 100_000 + "]" * 100_000,
        "huge.json": json.dumps({"time": time.time(), "pad": "x" * 100_000}),
    }
    for name, text in bad.items():
        (folder / name).write_text(text, encoding="utf-8", errors="surrogateescape")
    [seen] = node.failures_elsewhere()  # never an exception: the check runs every second
    assert seen["run_id"] == "run-a"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes_rank1_ooms(home: Path, rdzv_id: str, mark: str, envs: Sequence[Mapping[str, str]] = ({}, {})):
    """Two single-process gpudoc runs of one c10d rendezvous on this host (``envs``: each node's own
    variables), whose rank 1 runs out of memory: the nodes (ended), their statuses, their records and
    logs, and the failing node's record."""
    (home / "gpudoc.toml").write_text("[run]\noom_grace_s = 2\n")
    command = ["torchrun", "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{_free_port()}", f"--rdzv-id={rdzv_id}", "--monitor-interval=0.1",
               str(RANKS), "oom_block", mark]
    nodes = [Gpudoc("run", "--no-check", "--", *command, cwd=home, env=job_env(JOB_LINES="5", **env)) for env in envs]
    statuses = [node.wait(120) for node in nodes]
    records = [json.loads((d / "run.json").read_text()) for d in run_dirs(home)]
    logs = {r["id"]: (d / "output.log").read_bytes() for r, d in zip(records, run_dirs(home))}
    [failing] = [r for r in records if b"rank1 ready" in logs[r["id"]]]
    return nodes, statuses, records, logs, failing


@pytest.mark.slow
def test_two_nodes_one_oom_both_end_quickly_and_fix_names_the_node(isolated_home):
    mark = marker()
    started = time.monotonic()
    nodes, statuses, records, _logs, failing = _two_nodes_rank1_ooms(isolated_home, "twonodes", mark)
    took = time.monotonic() - started
    assert all(s != 0 for s in statuses), [n.stderr for n in nodes]
    assert took < 60, took
    assert len(records) == 2
    assert {r["job_id"] for r in records} == {"rdzv-twonodes"}
    [other] = [r for r in records if r is not failing]
    assert failing["cause"] == "gpu_oom" and failing["diagnosis"]["rank"] == 1
    # The healthy node heard of the OOM through the shared runs directory.
    other_stderr = next(n.stderr for n in nodes if other["id"] in n.stderr)
    assert "GPU out of memory on" in other_stderr, other_stderr
    fix = gpudoc_cli("fix", other["id"], failing["id"], "--json")
    doc = json.loads(fix.stdout)
    assert doc["diagnosis"]["cause"] == "gpu_oom" and doc["diagnosis"]["rank"] == 1, fix.stdout
    assert failing["id"] in json.dumps(doc["diagnosis"])
    assert_no_leftovers(mark)
    # `fix` with no argument reads every node of the job's latest attempt.
    assert failing["node_rank"] is None  # c10d: no node rank to be had
    label = f"{failing['host']} (run {failing['id']})"  # both nodes ran on this host: the run id tells them apart
    done = gpudoc_cli("fix", "--json", cwd=isolated_home)
    doc = json.loads(done.stdout)
    d = doc["diagnosis"]
    assert (d["cause"], d["rank"], d["node"], d["run_id"]) == ("gpu_oom", 1, label, failing["id"]), done.stdout
    assert doc["job_id"] == "rdzv-twonodes" and len(doc["sources"]) == 2
    text = gpudoc_cli("fix", cwd=isolated_home).stdout
    assert f"the first real failure is on node {label}, rank 1, GPU 1: gpu_oom." in text
    assert f"node {other['host']} (run {other['id']}): " in text and "ended because of it" in text


@pytest.mark.slow
def test_slurm_job_id_is_recorded(isolated_home):
    done = gpudoc_cli("run", "--no-check", "--", "true", env={"SLURM_JOB_ID": "991", "SLURM_STEP_ID": "2"})
    assert done.returncode == 0
    assert json.loads((run_dirs(isolated_home)[-1] / "run.json").read_text())["job_id"] == "slurm-991.2"


@pytest.mark.slow
def test_a_slurm_nodes_oom_printed_without_a_rank_prefix_is_attributed_from_the_workers_rank(isolated_home):
    # Two single-process nodes of one Slurm step; node 1's worker prints its OOM untagged: its RANK
    # names it, and Slurm's node id names the node.
    mark = marker()
    envs = [{"JOB_OOM_PREFIX": "0", "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NODEID": str(n)}
            for n in (0, 1)]
    _nodes, _statuses, records, logs, failing = _two_nodes_rank1_ooms(isolated_home, "untagged", mark, envs)
    assert b"[rank1]:" not in logs[failing["id"]]  # nothing in the text names the rank
    assert sorted(failing["worker_ranks"].values()) == [1]
    assert failing["cause"] == "gpu_oom" and failing["diagnosis"]["rank"] == 1
    assert failing["diagnosis"]["summary"].startswith("Rank 1 ran out of CUDA memory")
    other = next(r for r in records if r is not failing)
    fix = gpudoc_cli("fix", other["id"], failing["id"], "--json")
    assert json.loads(fix.stdout)["diagnosis"]["rank"] == 1, fix.stdout
    assert_no_leftovers(mark)
    assert sorted(r["node_rank"] for r in records) == [0, 1]
    assert {r["job_id"] for r in records} == {"slurm-4242.0"}
    d = json.loads(gpudoc_cli("fix", "--json", cwd=isolated_home).stdout)["diagnosis"]
    assert (d["rank"], d["node_rank"]) == (1, failing["node_rank"])
    assert d["node"] == f"{failing['host']} node {failing['node_rank']}"

