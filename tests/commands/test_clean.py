"""`gpudoc clean`: the command flow over real processes; only the GPU process list is faked."""

import json

import psutil

from gpudoc.commands.clean import clean
from gpudoc.workspace import Workspace
from tests.conftest import captured_workspace, gpudoc_cli
from tests.procs._spawn import ONE_GIB, gpu_facts, record_run, spawn, stop


class Gatherer:
    """NVML as gpudoc sees it: the holders are listed until they have exited."""

    def __init__(self, procs, store):
        self.procs, self.store, self.calls = procs, store, 0

    def __call__(self, **_kw):
        self.calls += 1
        living = {p.pid: 2 * ONE_GIB for p in self.procs if _alive(p.pid)}
        facts = gpu_facts(living, self.store)
        return facts


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _Machine(Workspace):
    """A workspace whose GPU facts come from a Gatherer instead of NVML."""

    gatherer = None

    def gather(self, **_kwargs):
        return self.gatherer()


def run_clean(store, procs, *, with_stderr=False, **kw):
    ws = captured_workspace(environ={"GPUDOC_HOME": str(store.home)}, cls=_Machine)
    ws.gatherer = Gatherer(procs, store)
    status = clean(ws, term_timeout=2, release_timeout=5, **kw)
    if with_stderr:
        return status, ws.console.out.getvalue(), ws.console.err.getvalue()
    return status, ws.console.out.getvalue()


def test_refuses_without_yes_when_not_a_terminal(store):
    proc = spawn("sleep", "300")
    try:
        record_run(store, [proc], pgid=proc.pid)
        status, out, err = run_clean(store, [proc], with_stderr=True)
        assert status == 1
        # The refusal is an error: stderr, not stdout (which a script may be reading).
        assert "refusing to signal processes without confirmation" in err and "--yes" in err
        assert "refusing" not in out
        assert _alive(proc.pid)
    finally:
        stop(proc)


def test_dry_run_signals_nothing(store):
    proc = spawn("sleep", "300")
    try:
        record = record_run(store, [proc], pgid=proc.pid)
        status, out = run_clean(store, [proc], dry_run=True)
        assert status == 0 and _alive(proc.pid)
        assert f"left over from gpudoc run {record.id}" in out
        assert "--dry-run: nothing signalled." in out
    finally:
        stop(proc)


def test_yes_ends_the_leftover_and_reports_freed_memory(store):
    proc = spawn("sleep", "300")
    try:
        record_run(store, [proc], pgid=proc.pid)
        status, out = run_clean(store, [proc], yes=True)
        assert status == 0
        assert f"ended PID {proc.pid} (SIGTERM)" in out
        assert "Freed 2.0 GiB on GPU 0 (released, per NVML)." in out
        assert "torch.cuda.empty_cache() in a fresh process frees nothing another process holds" in out
        assert not _alive(proc.pid)
    finally:
        stop(proc)


def test_json_document(store):
    proc = spawn("sleep", "300")
    try:
        record_run(store, [proc], pgid=proc.pid)
        status, out = run_clean(store, [proc], yes=True, as_json=True)
        doc = json.loads(out)
        assert doc["command"] == "clean" and doc["exit_code"] == status == 0
        assert [t["pid"] for t in doc["targets"]] == [proc.pid]
        assert doc["result"]["terminated"] == [proc.pid] and doc["result"]["freed_bytes"] == 2 * ONE_GIB
    finally:
        stop(proc)


def test_a_live_gpudoc_run_is_left_running_even_with_yes(store):
    # Another `gpudoc run` of the same user is training on this GPU: its job is not a stray.
    live_job, leftover = spawn("sleep", "300"), spawn("sleep", "301")
    try:
        running = record_run(store, [live_job], status="running", pgid=live_job.pid)
        record_run(store, [leftover], pgid=leftover.pid)
        status, out = run_clean(store, [live_job, leftover], yes=True, as_json=True)
        doc = json.loads(out)
        assert status == 0
        assert [t["pid"] for t in doc["targets"]] == [leftover.pid]
        assert doc["result"]["terminated"] == [leftover.pid]
        kept = {o["pid"]: o for o in doc["others"]}
        assert kept[live_job.pid]["kind"] == "own_live_job" and kept[live_job.pid]["run_id"] == running.id
        assert f"stop gpudoc run {running.id}" in kept[live_job.pid]["remedy"]
        assert _alive(live_job.pid) and not _alive(leftover.pid)
    finally:
        stop(live_job, leftover)


def test_a_live_process_of_no_run_is_named_not_ended(store):
    # A notebook kernel or a job started by hand: its parent (here, the test) is alive.
    proc = spawn("sleep", "300")
    try:
        status, out = run_clean(store, [proc], yes=True)
        assert status == 0 and _alive(proc.pid)
        assert f"kill -TERM {proc.pid}  # your live process: gpudoc clean leaves it running" in out
        assert "ended PID" not in out
    finally:
        stop(proc)


def test_without_a_driver_the_cli_says_so():
    result = gpudoc_cli("clean", "--yes")
    if "cannot see GPU processes" in result.stdout:
        assert result.returncode == 1
    assert "Traceback" not in result.stderr
