"""One multi-node job's records: which belong to one attempt, across nodes and reused job ids."""

from __future__ import annotations

import time

from gpudoc.runs.attempts import job_records
from gpudoc.runs.store import RunStore
from tests.runs.test_store import make


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def test_job_records_gather_one_attempt_of_a_job_across_nodes(tmp_path):
    store = RunStore(tmp_path)
    t = time.time() - 3600
    # An earlier attempt that reused the id (a fixed --rdzv-id): both of its nodes ended long ago.
    old = [make(store, job_id="rdzv-x", host=h, started_at=_stamp(t), ended_at=_stamp(t + 60)) for h in "ab"]
    make(store, job_id="rdzv-other", host="a", started_at=_stamp(t + 600), ended_at=_stamp(t + 700))
    # This attempt: node b started 3 s after node a (rendezvous), a is still writing.
    now_a = make(store, job_id="rdzv-x", host="a", node_rank=0, started_at=_stamp(t + 600))
    now_b = make(store, job_id="rdzv-x", host="b", node_rank=1, started_at=_stamp(t + 603),
                 ended_at=_stamp(t + 650))
    store.log_path(now_a.id).write_text("still going\n")
    assert [r.id for r in job_records(store, "rdzv-x")] == [*(r.id for r in old), now_a.id, now_b.id]
    assert [r.id for r in job_records(store, "rdzv-x", attempt_of=now_b)] == [now_a.id, now_b.id]
    assert [r.id for r in job_records(store, "rdzv-x", attempt_of=old[1])] == [r.id for r in old]
    loaded = store.load(now_b.id)
    assert loaded.node_rank == 1


def test_job_records_leave_out_an_attempt_that_ended_just_before_this_one(tmp_path):
    store = RunStore(tmp_path)
    t = time.time() - 3600
    # Within the clock allowance, but the same node cannot run two parts of one attempt in turn;
    # and a --retry-oom parent is an earlier attempt however close in time.
    before = make(store, job_id="slurm-9", host="a", started_at=_stamp(t), ended_at=_stamp(t + 10))
    failed = make(store, job_id="slurm-9", host="b", started_at=_stamp(t + 12), ended_at=_stamp(t + 14))
    retried = make(store, job_id="slurm-9", host="b", parent=failed.id, started_at=_stamp(t + 14))
    latest = make(store, job_id="slurm-9", host="a", started_at=_stamp(t + 13))
    store.log_path(latest.id).write_text("x\n")
    store.log_path(retried.id).write_text("x\n")
    assert [r.id for r in job_records(store, "slurm-9", attempt_of=latest)] == [retried.id, latest.id]
    assert before.id not in [r.id for r in job_records(store, "slurm-9", attempt_of=latest)]
