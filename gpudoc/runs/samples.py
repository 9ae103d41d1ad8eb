"""A run's ``gpu.csv`` read back as a timeline: memory per GPU over time, in bounded memory.

The launcher writes one row per GPU per second (``gpudoc.launch.watch``); a twelve-hour run on
eight GPUs is a few hundred thousand rows. The reader keeps at most ``width`` buckets per GPU
(the highest value in each, since a peak is what an OOM is about), whatever the file's size.

The file is input like any other: the launcher writes numbers and commas only, so each line is
read on its own, at most ``MAX_LINE_BYTES`` of it, and one that is not a sample (random bytes,
a NUL, a field of megabytes) is skipped and counted, never a reason to stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gpudoc.launch.watch import HEADER
from gpudoc.runs.tail import read_tail

# A sample's line is under 100 bytes; anything much longer is not one, and is never held whole.
MAX_LINE_BYTES = 4096
_COLUMNS = tuple(HEADER.strip().split(","))


@dataclass
class Timeline:
    start: float | None = None
    end: float | None = None
    # GPU index -> the highest memory use seen in each of the timeline's buckets (None: no sample)
    used: dict[int, list[int | None]] = field(default_factory=dict)
    total: dict[int, int] = field(default_factory=dict)  # GPU index -> capacity
    rows: int = 0
    skipped: int = 0  # lines that were not a sample (corrupted, cut short mid-file, over-long)


def read_timeline(path: Path, *, width: int = 60) -> Timeline:
    """Two passes over the file (the time span first), never more than ``width`` values per GPU."""
    span = _span(path)
    line = Timeline()
    if span is None:
        return line
    line.start, line.end = span
    length = max(line.end - line.start, 1e-9)
    try:
        with open(path, "rb") as handle:
            for sample in _samples(handle, line):
                buckets = line.used.setdefault(sample.gpu, [None] * width)
                index = min(int((sample.time - line.start) / length * width), width - 1)
                previous = buckets[index]
                buckets[index] = sample.used if previous is None else max(previous, sample.used)
                if sample.total:
                    line.total[sample.gpu] = sample.total
                line.rows += 1
    except OSError:
        return Timeline()
    return line


def _span(path: Path) -> tuple[float, float] | None:
    first = last = None
    try:
        with open(path, "rb") as handle:
            for sample in _samples(handle, Timeline()):
                first = sample.time if first is None else min(first, sample.time)
                last = sample.time if last is None else max(last, sample.time)
    except OSError:
        return None
    return (first, last) if first is not None and last is not None else None


@dataclass(frozen=True)
class Sample:
    """One row of gpu.csv: one GPU at one moment."""

    time: float
    gpu: int
    used: int
    total: int  # 0 when not known
    utilization: str  # as written: a percentage, or "" when NVML gave none
    job: int | None  # what the job's processes held on it


def parse_sample(row: dict[str, str]) -> Sample | None:
    """A row of gpu.csv by column name; None for a row cut short (the run was killed mid-write),
    a header of another tool, or anything else that is not a sample."""
    try:
        stamp = float(row["time"])
        gpu = int(row["gpu_index"])
        used = int(row["memory_used_bytes"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (stamp == stamp and abs(stamp) != float("inf")) or gpu < 0 or used < 0:
        return None  # nan, inf, a negative index or use: not what the launcher writes
    total = row.get("memory_total_bytes") or ""
    job = row.get("job_memory_bytes") or ""
    utilization = row.get("utilization_gpu_percent") or ""
    return Sample(stamp, gpu, used, int(total) if total.isdigit() else 0,
                  utilization if utilization.replace(".", "", 1).isdigit() else "",
                  int(job) if job.isdigit() else None)


def _lines(handle: IO[bytes]) -> Iterator[bytes | None]:
    """Each line, without its newline; None for one over ``MAX_LINE_BYTES`` (read past, never held).
    A last line without its newline is being written, or was cut by a kill: it is left out."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = handle.readline(1 << 16)
            yield None
            continue
        if not line.endswith(b"\n"):
            return
        yield line.rstrip(b"\r\n")


def _samples(handle: IO[bytes], counts: Timeline, columns: tuple[str, ...] | None = None) -> Iterator[Sample]:
    """The samples of a gpu.csv (or the tail of one, given its ``columns``); every other line but a
    header is counted in ``counts.skipped``."""
    for raw in _lines(handle):
        sample = None
        if raw is not None:
            try:
                text = raw.decode("ascii")
            except UnicodeDecodeError:
                text = ""
            cells = text.split(",")
            if columns is None or cells[0] == "time":  # a header says which column is which
                columns = tuple(cells) if cells[0] == "time" else _COLUMNS
                if cells[0] == "time":
                    continue
            if len(cells) == len(columns):
                sample = parse_sample(dict(zip(columns, cells)))
        if sample is None:
            counts.skipped += 1
            continue
        yield sample


@dataclass
class Newest:
    """The newest samples per GPU, oldest first, and how many lines of the tail were not samples."""

    gpus: dict[int, list[Sample]] = field(default_factory=dict)
    skipped: int = 0


def newest_samples(path: Path, *, history: int) -> Newest:
    """The newest ``history`` samples per GPU, oldest first, read from the end of the file only."""
    import io

    text = read_tail(path, _NEWEST_TAIL_BYTES)
    newest = Newest()
    counts = Timeline()
    for sample in _samples(io.BytesIO(text.encode("utf-8", "replace")), counts, _COLUMNS):
        kept = newest.gpus.setdefault(sample.gpu, [])
        kept.append(sample)
        del kept[:-history]
    newest.skipped = counts.skipped
    return newest


_NEWEST_TAIL_BYTES = 64 * 1024  # the newest rows: enough for a screenful of history on 8 GPUs
