"""Gather every fact once into one immutable ``Facts`` snapshot. Never crashes.

GPU facts come from NVML, or from saved files when ``snapshot_files`` are given (then host facts
are left unknown unless the file is gpudoc's own JSON, which carries its machine's). Process facts
are looked up only for the PIDs the GPUs report, and only when those PIDs belong to this machine
(NVML): PIDs in a saved nvidia-smi file come from another machine or another time, and looking
them up here would describe unrelated processes. A gpudoc ``--json`` snapshot brings its own
process, host and environment facts.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from gpudoc.facts.model import Facts, HostFacts, ProcessInfo, TorchFacts

SNAPSHOT_HOST = ("nvidia-smi output says nothing of its machine's CPUs, RAM, /dev/shm or disk "
                 "(and this machine's are not the ones to judge)")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def gather_facts(*, snapshot_files: Iterable[Path | str] = (), deep: bool = False, python: str | None = None,
                 runs: Any | None = None, nvml_backend: Any | None = None,
                 environ: Mapping[str, str] | None = None) -> Facts:
    """One snapshot of GPUs, GPU processes, host, environment and (``deep``) the target's torch.

    A bad snapshot file raises ``InputError`` (the user named it); every other failure becomes a
    reason inside the facts.
    """
    from gpudoc.facts.environment import relevant_env  # keep CLI start-up lean

    environ = os.environ if environ is None else environ
    files = [Path(f) for f in snapshot_files]
    if files:
        from gpudoc.facts.smi_files import load_snapshot

        facts = load_snapshot(files)
        if _carries_machine_facts(facts):
            # gpudoc's own JSON: host, environment, processes and torch are the other machine's.
            if deep and facts.torch is None:
                facts = replace(facts, torch=_torch(python))
            return facts
        # This machine's /dev/shm, CPUs and disk say nothing of the one the file came from: checks
        # over them would pass or fail the wrong box. The reason travels in the facts (and the JSON).
        facts = replace(facts, env=relevant_env(environ), host=HostFacts(unavailable={"host": SNAPSHOT_HOST}))
    else:
        facts = _from_nvml(nvml_backend)
        owners = _OwnersOnce(runs)
        facts = replace(facts, processes=_processes(facts, owners), env=relevant_env(environ), host=_host(runs, environ))
        facts = _device_users(facts, owners)
    if deep:
        facts = replace(facts, torch=_torch(python))
    return facts


def seen_with(facts: Facts, environ: Mapping[str, str]) -> Facts:
    """The same snapshot as a job with ``environ`` sees it (its CUDA_VISIBLE_DEVICES picks the
    GPUs the checks judge): the driver is not read again."""
    from gpudoc.facts.environment import relevant_env

    return replace(facts, env=relevant_env(environ))


def _carries_machine_facts(facts: Facts) -> bool:
    return bool(facts.env) or facts.host != HostFacts() or bool(facts.processes) or facts.torch is not None


def _from_nvml(backend: Any | None) -> Facts:
    try:
        from gpudoc.facts.nvml import read_gpus

        driver, cuda, nvml_version, gpus, error = read_gpus(backend)
    except Exception as exc:  # read_gpus never raises by design; this guards the design
        return Facts(collected_at=_now(), source="nvml", nvml_error=f"reading NVML failed: {exc}")
    return Facts(
        collected_at=_now(),
        source="nvml" if error is None else "none",
        driver_version=driver,
        cuda_driver_version=cuda,
        nvml_version=nvml_version,
        nvml_error=error,
        gpus=gpus,
    )


class _OwnersOnce:
    """The run store's owners index, read at the first process to look up and only then: the
    driver's processes and the device file's openers are looked up against the same index."""

    def __init__(self, runs: Any | None) -> None:
        self._runs = runs
        self._read = False
        self._owners: Any | None = None

    def get(self) -> Any | None:
        if not self._read:
            self._read = True
            try:
                self._owners = self._runs.owners() if self._runs is not None else None
            except Exception:
                self._owners = None
        return self._owners


def _processes(facts: Facts, owners: _OwnersOnce) -> tuple[ProcessInfo, ...]:
    pids = []
    for gpu in facts.gpus:
        for proc in gpu.processes or ():
            if proc.pid not in pids:
                pids.append(proc.pid)
    return _process_facts(pids, owners)


def _process_facts(pids: list[int], owners: _OwnersOnce) -> tuple[ProcessInfo, ...]:
    if not pids:
        return ()
    try:
        from gpudoc.facts.procs import process_facts

        return process_facts(pids, owners=owners.get())
    except Exception:
        return ()  # the GPU facts still name the PIDs; checks treat them as unknown


def _device_users(facts: Facts, owners: _OwnersOnce) -> Facts:
    """For memory the driver lists no process for, on bare metal: who has the GPU's device file
    open (``fuser -v /dev/nvidia*``), and their /proc facts beside the driver's processes."""
    from gpudoc.facts.holders import unlisted_bytes

    if facts.host.in_container is not False or not any(unlisted_bytes(g) for g in facts.gpus):
        return facts  # a container cannot see the host's processes; nothing unlisted: nothing to look for
    try:
        from gpudoc.facts.device_users import device_users

        users = device_users(exclude=os.getpid())
    except Exception:
        return facts
    known = {p.pid for p in facts.processes}
    more = [o.pid for o in users.openers if o.pid not in known]
    return replace(facts, device_users=users, processes=facts.processes + _process_facts(more, owners))


def _host(runs: Any | None, environ: Mapping[str, str]) -> HostFacts:
    root = getattr(runs, "root", None)
    if root is None:
        from gpudoc.runs.store import RunStore

        root = RunStore.locate(Path.cwd(), environ).root
    try:
        from gpudoc.facts.host import host_facts

        return host_facts(root)
    except Exception as exc:
        return HostFacts(runs_dir=str(root), unavailable={"host": f"reading host facts failed: {exc}"})


def _torch(python: str | None) -> TorchFacts:
    from gpudoc.facts.model import TorchFacts
    from gpudoc.facts.torch_probe import probe_torch

    try:
        return probe_torch(python)
    except Exception as exc:
        return TorchFacts(python=python or "", ok=False, error=f"torch probe failed: {exc}")
