"""Real processes for the classify/clean tests, and facts whose GPU process list points at them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

import psutil

from gpudoc.facts.model import GpuProcess
from gpudoc.facts.procs import process_facts
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore, new_run_id
from gpudoc.units import GIB
from tests.checks._real import HOST, T4, snap


def spawn(*argv: str, **kw) -> subprocess.Popen:
    proc = subprocess.Popen(list(argv) or ["sleep", "300"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True, **kw)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # wait until exec happened, so create_time/cmdline are final
        try:
            if psutil.Process(proc.pid).cmdline()[:1] == [argv[0] if argv else "sleep"]:
                break
        except psutil.Error:
            pass
        time.sleep(0.01)
    return proc


def ignoring_term() -> subprocess.Popen:
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def create_time(pid: int) -> float:
    return psutil.Process(pid).create_time()


def record_run(store: RunStore, procs, *, status="failed", pgid=None, create_times=None) -> RunRecord:
    """A run record that owns ``procs``, as `gpudoc run` writes it."""
    started = min(create_time(p.pid) for p in procs) - 5
    record = RunRecord(
        id=new_run_id(), command=["torchrun", "train.py"], cwd=str(store.home), status=status, user="me",
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        ended_at=None if status == "running" else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() + 60)),
        process_group=pgid,
        pids=[{"pid": p.pid, "create_time": (create_times or {}).get(p.pid, create_time(p.pid))} for p in procs],
    )
    store.create(record)
    return record


def gpu_facts(pids_bytes: dict[int, int], store: RunStore | None = None):
    """The T4 capture, as if read from NVML here, with its process list replaced by real PIDs."""
    facts = snap(T4, live=True, host=replace(HOST, uid=os.getuid()))
    gpu = replace(facts.gpus[0], processes=tuple(GpuProcess(pid=p, used_memory_bytes=b, name="python", type="C")
                                                 for p, b in pids_bytes.items()),
                  memory_used_bytes=sum(pids_bytes.values()) + 100 * 2**20)
    return replace(facts, gpus=(gpu,), processes=process_facts(list(pids_bytes), owners=store.owners() if store else None))


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=5)
        except Exception:
            pass


ONE_GIB = GIB
