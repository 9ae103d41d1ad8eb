"""GPU memory and utilisation while the job runs: one row per GPU per interval into ``gpu.csv``,
the peak per GPU for the run record.

The sampler runs in its own thread so a slow NVML call never delays the tee. GPU facts come from
one NVML session of the facts layer (``gpudoc.facts.nvml.Session``); tests pass a fake backend or a
reader. Where NVML is missing (no driver, no GPU) the sampler stops quietly: the job is what
matters, and ``gpudoc check`` is where a missing driver is reported. NVML that worked and then
fails (a GPU fallen off the bus, a driver reloaded) is another matter: that is said once, with
the time, and kept in the record (``samples_error``); the sampler keeps trying and says when the
samples come back. A ``gpu.csv`` that cannot be written (a full disk) stops the file, not the peaks.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TextIO

from gpudoc.job.identity import visible_selection

if TYPE_CHECKING:
    from gpudoc.facts.model import Gpu

PROCESSES = "processes.json"
HEADER = ("time,gpu_index,memory_used_bytes,memory_total_bytes,utilization_gpu_percent,"
          "job_memory_bytes\n")

Reader = Callable[[], tuple]  # () -> (driver, cuda_driver, nvml_version, gpus, error)


def nvml_reader(backend: Any = None) -> Reader | None:
    """A reader over one NVML session kept open for the whole run (the sampler closes it);
    None when NVML cannot be used."""
    from gpudoc.facts.nvml import Session

    return Session.open(backend)


class GpuSampler:
    """Takes one sample per ``sample()`` call; ``peaks`` and ``gpus`` are the record's fields."""

    def __init__(self, path: Path | None, *, reader: Reader | None = None,
                 reader_factory: Callable[[], Reader | None] | None = None,
                 environ: Mapping[str, str] | None = None,
                 job_pids: Callable[[], Iterable[int]] | None = None,
                 clock: Callable[[], float] = time.time, mode: int = 0o600,
                 warn: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.mode = mode
        self.reader = reader
        self.indices, self.uuids = visible_selection(environ or {})
        self.job_pids = job_pids
        self.clock = clock
        self.peaks: dict[str, int] = {}
        self.gpus: list[dict] = []
        self.samples = 0
        # The factory runs in the sampler's thread: importing the NVML layer costs start-up
        # time the job should not wait for.
        self.reader_factory = reader_factory
        self.disabled = reader is None and reader_factory is None
        self.error: str | None = None  # the first mid-run failure (NVML, or writing gpu.csv), for the record
        self.warn = warn
        self._failing_since: float | None = None
        self._write_failed = False
        self._handle: TextIO | None = None
        self._lock = threading.Lock()

    def _selected(self, gpu: Gpu) -> bool:
        if self.indices is None and self.uuids is None:
            return True
        return (self.indices is not None and gpu.index in self.indices) or (
            self.uuids is not None and gpu.uuid in self.uuids)

    def sample(self) -> bool:
        """One row per selected GPU; False when there is nothing to sample (no NVML)."""
        if self.disabled:
            return False
        if self.reader is None:
            self.reader = self.reader_factory() if self.reader_factory is not None else None
            if self.reader is None:
                self.disabled = True
                return False
        try:
            result = self.reader()
            gpus, error = result[3], result[4]
        except Exception as exc:
            gpus, error = (), repr(exc)
        if error is not None or not gpus:
            if self.samples == 0:
                self.disabled = True  # no driver, no GPU: stop asking every second
            elif self._failing_since is None:
                self._failing_since = self.clock()
                why = error or "no GPU listed"
                self.error = self.error or f"NVML failed mid-run at {time.strftime('%H:%M:%S')}: {why}"
                self._say(f"GPU memory samples stopped: {why}; the job goes on, the peaks so far are kept")
            return False
        if self._failing_since is not None:
            self._say(f"GPU memory samples resumed after {self.clock() - self._failing_since:.0f} s")
            self._failing_since = None
        pids = set(self.job_pids()) if self.job_pids is not None else set()
        now = self.clock()
        rows = []
        held: dict[int, int] = {}  # the job's processes -> what they hold now, over every GPU
        with self._lock:
            if self.disabled:
                return False
            for gpu in gpus:
                if not self._selected(gpu):
                    continue
                key = str(gpu.index)
                used = gpu.memory_used_bytes
                job = None
                if gpu.processes is not None and pids:
                    job = sum(p.used_memory_bytes or 0 for p in gpu.processes if p.pid in pids)
                    for proc in gpu.processes:
                        if proc.pid in pids:
                            held[proc.pid] = held.get(proc.pid, 0) + (proc.used_memory_bytes or 0)
                if used is not None:
                    self.peaks[key] = max(self.peaks.get(key, 0), int(used))
                if not any(g["index"] == gpu.index for g in self.gpus):
                    self.gpus.append({"index": gpu.index, "name": gpu.name,
                                      "total_bytes": gpu.memory_total_bytes, "uuid": gpu.uuid})
                rows.append(",".join(_cell(v) for v in (
                    f"{now:.3f}", gpu.index, used, gpu.memory_total_bytes,
                    gpu.utilization_gpu_percent, job)) + "\n")
            self.samples += 1
            self._write(rows)
            if pids:
                self._write_held(held)
        return True

    def _write_held(self, held: dict[int, int]) -> None:
        """``processes.json`` beside gpu.csv: what each of the job's processes holds now (for
        `gpudoc watch`). Replaced every sample, without an fsync: only the newest one matters."""
        if self.path is None or self._write_failed:
            return
        target = self.path.with_name(PROCESSES)
        tmp = target.with_name(f".{PROCESSES}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, self.mode)
            with open(fd, "w", encoding="utf-8") as handle:
                json.dump({str(pid): size for pid, size in sorted(held.items())}, handle)
            os.replace(tmp, target)
        except OSError:
            pass  # the csv's own failure says the disk is full; the follower shows PIDs alone

    def _say(self, message: str) -> None:
        if self.warn is not None:
            self.warn(message)

    def _write(self, rows: list[str]) -> None:
        if self.path is None or not rows or self._write_failed:
            return
        try:
            self._append(self.path, rows)
        except OSError as exc:
            self._write_failed = True
            self.error = self.error or f"cannot write {self.path}: {exc.strerror or exc}"
            self._say(f"cannot write {self.path} any more ({exc.strerror or exc}); the peaks are still kept")

    def _append(self, path: Path, rows: list[str]) -> None:
        if self._handle is None:
            new = not path.exists()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, self.mode)
            self._handle = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run
            if new:
                self._handle.write(HEADER)
        self._handle.writelines(rows)
        self._handle.flush()  # readable from another pane while the job runs

    def close(self) -> None:
        with self._lock:
            self.disabled = True  # a sample still in flight writes nothing after this
            if self._handle is not None:
                try:
                    self._handle.close()
                except OSError:
                    pass  # the buffer could not be flushed (a full disk): said when it failed
                self._handle = None
            close_reader = getattr(self.reader, "close", None)
            if close_reader is not None:
                close_reader()  # shut the NVML session down


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class SamplerThread(threading.Thread):
    """Calls ``sampler.sample()`` every ``interval_s`` until stopped or NVML proves absent."""

    def __init__(self, sampler: GpuSampler, interval_s: float = 1.0) -> None:
        super().__init__(name="gpudoc-gpu-sampler", daemon=True)
        self.sampler = sampler
        self.interval_s = max(float(interval_s), 0.05)
        self._halt = threading.Event()

    def run(self) -> None:
        # A job that ends within the first interval (a typo, `python -c pass`) never pays for
        # loading NVML; a training job's first second holds no peak worth sampling.
        if self._halt.wait(self.interval_s):
            return
        while not self._halt.is_set():
            self.sampler.sample()
            if self.sampler.disabled:
                return
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2.0)  # an NVML call stuck in the driver must not hold up the record
        self.sampler.close()
