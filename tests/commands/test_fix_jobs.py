"""`gpudoc fix` over one job's nodes: every node's record of the attempt, the first real failure
named by node and rank, the other nodes as its consequences; the node rank the records carry. Real
two-node torchrun jobs: tests/launch/test_jobsync.py, which asks `fix` about them too."""

from __future__ import annotations

import json
import time

import pytest

from gpudoc.commands.fix import fix
from gpudoc.errors import UsageError
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore, new_run_id
from tests.conftest import captured_workspace

OOM = (
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 23.68 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 22.10 "
    "GiB memory in use. Of the allocated memory 21.20 GiB is allocated by PyTorch, and 300.00 MiB is "
    "reserved by PyTorch but unallocated.\n"
)
NCCL = (
    "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600291 "
    "milliseconds before timing out.\n"
)


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def _record(store: RunStore, log: str, *, host: str, start: float, end: float, job_id="slurm-55.0",
            node=None, exit_code=1) -> RunRecord:
    record = RunRecord(id=new_run_id(), command=["python", "train.py"], cwd=str(store.home.parent),
                       job_id=job_id, host=host, node_rank=node, started_at=_stamp(start),
                       ended_at=_stamp(end), exit_code=exit_code, status="failed")
    store.create(record)
    store.log_path(record.id).write_text(log)
    return record


def _fix(tmp_path, **kwargs) -> tuple[int, str]:
    ws = captured_workspace(tmp_path)
    status = fix(ws, **kwargs)
    return status, ws.console.out.getvalue()


def test_no_arguments_reads_every_node_of_the_latest_attempt(tmp_path):
    store = RunStore(tmp_path / ".gpudoc")
    t = time.time() - 7200
    # A requeued Slurm job keeps its id: the earlier attempt failed on node-a, long ago.
    _record(store, OOM.replace("rank3", "rank0"), host="node-a", start=t, end=t + 30, node=0)
    _record(store, NCCL, host="node-b", start=t, end=t + 30, node=1)
    oom = _record(store, OOM, host="node-b", start=t + 3600, end=t + 3660, node=1)
    timeout = _record(store, NCCL, host="node-a", start=t + 3601, end=t + 3661, node=0)
    _status, out = _fix(tmp_path, as_json=True)
    doc = json.loads(out)
    d = doc["diagnosis"]
    assert (d["cause"], d["rank"], d["gpu_index"]) == ("gpu_oom", 3, 1)
    assert (d["node"], d["host"], d["node_rank"], d["run_id"]) == ("node-b", "node-b", 1, oom.id)
    assert doc["run_id"] == oom.id and doc["job_id"] == "slurm-55.0"
    assert [(s["run_id"], s["role"]) for s in doc["sources"]] == [(oom.id, "first_failure"),
                                                                 (timeout.id, "consequence")]
    _status, out = _fix(tmp_path)
    lines = out.splitlines()
    assert lines[0] == (f"Job slurm-55.0: looked at 2 records/logs; the first real failure is on node node-b "
                        f"(run {oom.id}), rank 3, GPU 1: gpu_oom.")
    assert lines[1].strip() == f"node node-a (run {timeout.id}): nccl_timeout: ended because of it"


def test_a_run_without_a_job_id_is_read_alone(tmp_path):
    store = RunStore(tmp_path / ".gpudoc")
    t = time.time() - 60
    _record(store, OOM, host="h", start=t, end=t + 1, job_id=None)
    _status, out = _fix(tmp_path, as_json=True)
    doc = json.loads(out)
    assert "sources" not in doc and doc["diagnosis"]["host"] == "h" and doc["diagnosis"]["node"] == "h"


def test_rerun_of_a_job_across_nodes_is_refused_with_what_to_do(tmp_path):
    store = RunStore(tmp_path / ".gpudoc")
    t = time.time() - 60
    _record(store, OOM, host="a", start=t, end=t + 5)
    _record(store, NCCL, host="b", start=t, end=t + 5)
    with pytest.raises(UsageError, match="2 runs were read .one job.s nodes.: use --apply"):
        _fix(tmp_path, rerun=True)
