"""End this user's stray processes that hold GPU memory: SIGTERM, then SIGKILL, PID-reuse safe.

Rules that never bend:
- strays only: leftovers of finished gpudoc runs and orphans (their parent is gone); a live job,
  a live ``gpudoc run``'s above all, is someone's work in progress and is left running;
- only processes of this uid, never PID 1, never gpudoc itself or one of its ancestors;
- immediately before every signal the target is re-verified: same PID, same create time, same uid
  (a PID reused by an unrelated process since the plan was made is left alone);
- nothing is signalled without ``yes`` or a confirmation.

Freeing memory means ending the process that holds it: ``torch.cuda.empty_cache()`` in a fresh
process releases only that process's own cache, never memory another process holds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpudoc.facts.holders import GpuHolder, classify_gpu_processes
from gpudoc.facts.model import Facts, ProcessInfo, RunOwnerIndex
from gpudoc.procs.identity import ProcessRef, same_start
from gpudoc.procs.terminate import terminate as end_processes

if TYPE_CHECKING:
    import psutil

EMPTY_CACHE_NOTE = ("torch.cuda.empty_cache() in a fresh process frees nothing another process holds: "
                    "the memory comes back only when the process holding it ends.")

# Leftovers of earlier gpudoc runs first: they are known to be dead jobs.
_ORDER = {"orphan_of_run": 0, "own_other": 1}
STRAY_KINDS = frozenset(_ORDER)
TERM_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Target:
    """A process the plan would end: its /proc facts, why, and what it holds."""

    process: ProcessInfo
    kind: str  # orphan_of_run | own_other | group_member (same run, holds no GPU memory)
    gpu_indexes: tuple[int, ...] = ()
    bytes: int | None = None
    run_id: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def create_time(self) -> float | None:
        return self.process.create_time

    @property
    def pgid(self) -> int | None:
        return self.process.pgid

    @property
    def name(self) -> str | None:
        return self.process.name

    @property
    def cmdline(self) -> tuple[str, ...]:
        return tuple(self.process.cmdline)

    @property
    def ref(self) -> ProcessRef:
        return ProcessRef(self.pid, self.create_time)

    def to_dict(self) -> dict:
        return {"pid": self.pid, "kind": self.kind, "gpus": list(self.gpu_indexes), "bytes": self.bytes,
                "run_id": self.run_id, "pgid": self.pgid, "name": self.name, "create_time": self.create_time}


@dataclass
class CleanOutcome:
    refused: bool = False
    terminated: list[int] = field(default_factory=list)  # ended after SIGTERM
    killed: list[int] = field(default_factory=list)  # needed SIGKILL
    survivors: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (pid, why it was not signalled)
    signals: list[tuple[int, int]] = field(default_factory=list)  # (pid, signal) actually sent
    freed_bytes: int | None = None
    released: bool | None = None  # NVML showed the memory back

    @property
    def ended(self) -> list[int]:
        return self.terminated + self.killed

    def to_dict(self) -> dict:
        return {
            "refused": self.refused, "terminated": self.terminated, "killed": self.killed,
            "survivors": self.survivors, "skipped": [{"pid": p, "reason": r} for p, r in self.skipped],
            "freed_bytes": self.freed_bytes, "released": self.released,
        }


def protected_pids() -> set[int]:
    """gpudoc itself, its ancestors (the shell, tmux, sshd...) and init."""
    import psutil

    out = {0, 1, os.getpid()}
    try:
        out.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    return out


def plan_clean(facts: Facts, owners: RunOwnerIndex | None = None, gpus: Iterable[int] | None = None, *,
               uid: int | None = None, protected: set[int] | None = None) -> list[Target]:
    """This user's strays holding memory on ``gpus`` (all when None), leftovers of gpudoc runs
    first, with the rest of each leftover run's process group (torchrun, its other workers)."""
    import psutil

    uid = os.getuid() if uid is None else uid
    protected = protected_pids() if protected is None else protected
    # A process found holding a GPU's device file is named, never cleaned: the driver lists no
    # memory of its own, and monitors (nvtop, DCGM) hold the file too.
    holders = [h for h in classify_gpu_processes(facts, gpus=gpus)
               if h.kind in STRAY_KINDS and h.pid is not None and not h.via_device]
    by_pid: dict[int, Target] = {}
    for h in sorted(holders, key=lambda h: _ORDER[h.kind]):
        if h.pid is None or h.process is None or h.pid in protected or h.uid != uid or h.create_time is None:
            continue
        if h.pid in by_pid:
            by_pid[h.pid] = _merge(by_pid[h.pid], h)
            continue
        by_pid[h.pid] = Target(h.process, h.kind, (h.gpu_index,), h.bytes, h.run_id)
    # Whole process groups of leftover runs: torchrun and its workers without GPU memory die too.
    groups = {t.pgid: t.run_id for t in by_pid.values() if t.kind == "orphan_of_run" and t.pgid and t.pgid > 1}
    if groups and owners is not None:
        for proc in psutil.process_iter(["pid", "uids", "create_time", "name", "cmdline"]):
            try:
                pid = proc.info["pid"]
                if pid in by_pid or pid in protected or proc.info["uids"] is None or proc.info["uids"].real != uid:
                    continue
                pgid = os.getpgid(pid)
            except (psutil.Error, OSError):
                continue
            if pgid not in groups:
                continue
            owner = owners.owner(pid, proc.info["create_time"], pgid)
            if owner is None or owner.run_id != groups[pgid]:
                continue  # the group id was reused by an unrelated job
            info = ProcessInfo(pid=pid, visible=True, uid=uid, pgid=pgid, create_time=proc.info["create_time"],
                               name=proc.info["name"], cmdline=tuple(proc.info["cmdline"] or ()),
                               gpudoc_run_id=owner.run_id, gpudoc_run_live=owner.live)
            by_pid[pid] = Target(info, "group_member", (), None, owner.run_id)
    order = {**_ORDER, "group_member": _ORDER["orphan_of_run"]}
    return sorted(by_pid.values(), key=lambda t: (order[t.kind], t.run_id or "", t.pid))


def _merge(t: Target, h: GpuHolder) -> Target:
    total = (t.bytes or 0) + (h.bytes or 0) if (t.bytes is not None or h.bytes is not None) else None
    return replace(t, gpu_indexes=tuple(dict.fromkeys((*t.gpu_indexes, h.gpu_index))), bytes=total)


def verify(target: Target, *, uid: int | None = None) -> tuple[psutil.Process | None, str]:
    """The live psutil.Process for the target, or (None, why): gone, PID reused, another uid, protected."""
    import psutil

    uid = os.getuid() if uid is None else uid
    if target.pid in (0, 1) or target.pid == os.getpid():
        return None, "protected"
    try:
        proc = psutil.Process(target.pid)
        created = proc.create_time()
        owner = proc.uids().real
        status = proc.status()
    except psutil.NoSuchProcess:
        return None, "already gone"
    except psutil.AccessDenied:
        return None, "access denied"
    if not same_start(created, target.create_time):
        return None, "PID reused by another process since the plan"
    if owner != uid or target.process.uid != uid:
        return None, f"owned by uid {owner}, not {uid}"
    if status == psutil.STATUS_ZOMBIE:
        return None, "already dead (zombie, waiting for its parent)"
    return proc, ""


def terminate(targets: list[Target], *, yes: bool = False, confirm: Callable[[list[Target]], bool] | None = None,
              term_timeout: float = TERM_TIMEOUT_S, kill_timeout: float = KILL_TIMEOUT_S,
              uid: int | None = None) -> CleanOutcome:
    """SIGTERM every target, SIGKILL what is left after ``term_timeout``; re-verify before each signal."""
    result = CleanOutcome()
    if not targets:
        return result
    if not yes and (confirm is None or not confirm(targets)):
        result.refused = True
        return result
    by_ref = {t.ref: t for t in targets}

    def may_signal(ref: ProcessRef) -> str | None:
        proc, why = verify(by_ref[ref], uid=uid)
        # A process that ended by itself needs no signal and is no refusal either.
        return None if proc is not None else (why or "not verified")

    ended = end_processes(list(by_ref), grace_s=term_timeout, kill_wait_s=kill_timeout, may_signal=may_signal)
    result.terminated = [r.pid for r in ended.terminated]
    result.killed = [r.pid for r in ended.killed]
    result.survivors = [r.pid for r in ended.survivors]
    result.skipped = [(r.pid, why) for r, why in ended.skipped if why not in _NOT_REFUSALS]
    result.signals = ended.signals
    return result


_NOT_REFUSALS = ("already gone", "already dead (zombie, waiting for its parent)")


def _used(facts: Facts, gpus: Iterable[int] | None) -> dict[int, int]:
    wanted = set(gpus) if gpus is not None else None
    return {g.index: g.memory_used_bytes or 0 for g in facts.gpus
            if g.memory_used_bytes is not None and (wanted is None or g.index in wanted)}


def wait_for_release(regather: Callable[[], Facts], before: Facts, pids: Iterable[int], gpus: Iterable[int] | None = None,
                     *, timeout: float = 15.0, interval: float = 0.5,
                     sleep: Callable[[float], None] = time.sleep) -> tuple[int | None, bool, Facts]:
    """Poll NVML (``regather``) until none of ``pids`` is listed on the GPUs any more.

    Returns (bytes freed on those GPUs, whether the driver released them, the last facts). The
    driver frees a dead process's memory when its context is torn down, which can lag the exit.
    """
    pids = set(pids)
    gpus = list(gpus) if gpus is not None else None
    start = _used(before, gpus)
    deadline = time.monotonic() + timeout
    after = before
    released = False
    while True:
        after = regather()
        listed = {p.pid for g in after.gpus for p in (g.processes or ())
                  if gpus is None or g.index in gpus}
        if not (listed & pids):
            released = True
            break
        if time.monotonic() >= deadline:
            break
        sleep(interval)
    end = _used(after, gpus)
    if not start or not end:
        return None, released, after
    freed = sum(max(start[i] - end.get(i, start[i]), 0) for i in start)
    return freed, released, after
