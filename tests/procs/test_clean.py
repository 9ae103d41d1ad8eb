"""plan_clean / terminate / wait_for_release against real processes (only the GPU list is faked)."""

import os
import signal
from dataclasses import replace

import psutil

from gpudoc.facts.model import ProcessInfo
from gpudoc.procs.clean import Target, plan_clean, terminate, verify, wait_for_release
from tests.procs._spawn import ONE_GIB, gpu_facts, ignoring_term, record_run, spawn, stop


def _info(pid: int, create_time: float) -> ProcessInfo:
    """A plan entry's process as this user's (a plan is only ever made of this user's processes)."""
    return ProcessInfo(pid=pid, visible=True, uid=os.getuid(), create_time=create_time)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_plan_puts_run_leftovers_first_with_their_whole_group(store):
    # A "torchrun" shell with two workers in its own session; one worker holds GPU memory.
    group = spawn("sh", "-c", "sleep 301 & sleep 302 & wait")
    live = spawn("sleep", "303")
    try:
        import time

        deadline = time.monotonic() + 5
        while len(psutil.Process(group.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = psutil.Process(group.pid).children()
        gpu_worker = workers[0]
        record = record_run(store, [group, gpu_worker], pgid=group.pid)
        facts = gpu_facts({live.pid: 2 * ONE_GIB, gpu_worker.pid: ONE_GIB}, store)
        targets = plan_clean(facts, store.owners(), [0])
        kinds = [(t.pid, t.kind) for t in targets]
        assert live.pid not in dict(kinds)  # a live process is no stray: never in the plan
        leftovers = {t.pid for t in targets if t.run_id == record.id}
        assert leftovers == {group.pid, *(w.pid for w in workers)}
        assert dict(kinds)[gpu_worker.pid] == "orphan_of_run"
    finally:
        stop(group, live)


def test_terminate_sigterm_then_sigkill(store):
    polite = spawn("sleep", "300")
    stubborn = ignoring_term()
    try:
        record_run(store, [polite, stubborn])  # leftovers of a failed run: strays
        facts = gpu_facts({polite.pid: ONE_GIB, stubborn.pid: ONE_GIB}, store)
        targets = plan_clean(facts, store.owners(), [0])
        assert {t.pid for t in targets} == {polite.pid, stubborn.pid}
        result = terminate(targets, yes=True, term_timeout=0.5, kill_timeout=5)
        assert result.terminated == [polite.pid]
        assert result.killed == [stubborn.pid]
        assert (stubborn.pid, signal.SIGKILL) in result.signals
        assert not alive(polite.pid) and not alive(stubborn.pid)
    finally:
        stop(polite, stubborn)


def test_pid_reuse_guard_leaves_a_different_process_alone():
    proc = spawn("sleep", "300")
    try:
        real = psutil.Process(proc.pid).create_time()
        # The plan was made for an earlier process with this PID.
        stale = Target(_info(proc.pid, real - 100), kind="own_other", gpu_indexes=(0,))
        result = terminate([stale], yes=True, term_timeout=0.2)
        assert result.signals == []
        assert result.skipped == [(proc.pid, "PID reused by another process since the plan")]
        assert alive(proc.pid)
    finally:
        stop(proc)


def test_another_uid_is_never_signalled():
    if os.getuid() == 0:
        other = spawn("sleep", "300", user=65534)
        pid = other.pid
    else:
        other, pid = None, 1
    try:
        facts = gpu_facts({pid: ONE_GIB})
        assert plan_clean(facts, None, [0]) == []
        # Even a forged target for it is refused at signal time.
        forged = Target(_info(pid, psutil.Process(pid).create_time()), kind="own_other")
        result = terminate([forged], yes=True, term_timeout=0.2)
        assert result.signals == []
        assert "owned by uid" in result.skipped[0][1]
        assert alive(pid)
    finally:
        if other:
            stop(other)


def test_gpudoc_itself_and_its_ancestors_are_protected(store):
    me = psutil.Process()
    pids = {me.pid: ONE_GIB, **{p.pid: ONE_GIB for p in me.parents()[:2]}}
    facts = gpu_facts(pids, store)
    assert plan_clean(facts, store.owners(), [0]) == []
    _proc, why = verify(Target(_info(os.getpid(), me.create_time()), kind="own_other"))
    assert why == "protected"


def test_nothing_is_signalled_without_yes_or_confirmation(store):
    proc = spawn("sleep", "300")
    try:
        record_run(store, [proc])
        targets = plan_clean(gpu_facts({proc.pid: ONE_GIB}, store), store.owners(), [0])
        assert terminate(targets, yes=False, confirm=None).refused
        asked = []
        assert terminate(targets, confirm=lambda t: asked.append(len(t)) or False).refused
        assert asked == [1] and alive(proc.pid)
        result = terminate(targets, confirm=lambda t: True, term_timeout=2)
        assert result.terminated == [proc.pid]
    finally:
        stop(proc)


def test_wait_for_release_reports_the_bytes_nvml_gave_back():
    proc = spawn("sleep", "300")
    try:
        before = gpu_facts({proc.pid: 3 * ONE_GIB})
        still = before
        gone = replace(before, gpus=(replace(before.gpus[0], processes=(), memory_used_bytes=100 * 2**20),))
        answers = iter([still, still, gone])
        naps = []
        freed, released, after = wait_for_release(lambda: next(answers), before, [proc.pid], [0],
                                                  timeout=5, interval=0.1, sleep=naps.append)
        assert released and after is gone
        assert freed == 3 * ONE_GIB
        assert naps == [0.1, 0.1]
    finally:
        stop(proc)


def test_wait_for_release_gives_up_after_the_timeout():
    before = gpu_facts({os.getpid(): ONE_GIB})
    freed, released, _ = wait_for_release(lambda: before, before, [os.getpid()], [0], timeout=0, sleep=lambda s: None)
    assert not released and freed == 0
