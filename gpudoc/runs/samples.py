"""A run's ``gpu.csv`` read back as a timeline: memory per GPU over time, in bounded memory.

The launcher writes one row per GPU per second (``gpudoc.launch.watch``); a twelve-hour run on
eight GPUs is a few hundred thousand rows. The reader keeps at most ``width`` buckets per GPU
(the highest value in each, since a peak is what an OOM is about), whatever the file's size.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from gpudoc.launch.watch import HEADER
from gpudoc.runs.tail import read_tail


@dataclass
class Timeline:
    start: float | None = None
    end: float | None = None
    # GPU index -> the highest memory use seen in each of the timeline's buckets (None: no sample)
    used: dict[int, list[int | None]] = field(default_factory=dict)
    total: dict[int, int] = field(default_factory=dict)  # GPU index -> capacity
    rows: int = 0


def read_timeline(path: Path, *, width: int = 60) -> Timeline:
    """Two passes over the file (the time span first), never more than ``width`` values per GPU."""
    span = _span(path)
    line = Timeline()
    if span is None:
        return line
    line.start, line.end = span
    length = max(line.end - line.start, 1e-9)
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        for row in csv.DictReader(handle):
            sample = parse_sample(row)
            if sample is None:
                continue
            stamp, gpu, used, total = sample.time, sample.gpu, sample.used, sample.total
            buckets = line.used.setdefault(gpu, [None] * width)
            index = min(int((stamp - line.start) / length * width), width - 1)
            previous = buckets[index]
            buckets[index] = used if previous is None else max(previous, used)
            if total:
                line.total[gpu] = total
            line.rows += 1
    return line


def _span(path: Path) -> tuple[float, float] | None:
    first = last = None
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            for row in csv.DictReader(handle):
                sample = parse_sample(row)
                if sample is None:
                    continue
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
    """A csv.DictReader row of gpu.csv; None for a row cut short (the run was killed mid-write)
    or a header of another tool."""
    try:
        stamp = float(row["time"])
        gpu = int(row["gpu_index"])
        used = int(row["memory_used_bytes"])
    except (KeyError, TypeError, ValueError):
        return None
    total = row.get("memory_total_bytes") or ""
    job = row.get("job_memory_bytes") or ""
    return Sample(stamp, gpu, used, int(total) if total.isdigit() else 0, row.get("utilization_gpu_percent") or "",
                  int(job) if job.isdigit() else None)


def newest_samples(path: Path, *, history: int) -> dict[int, list[Sample]]:
    """The newest ``history`` samples per GPU, oldest first, read from the end of the file only."""
    text = read_tail(path, _NEWEST_TAIL_BYTES)
    if not text:
        return {}
    if not text.startswith(HEADER):
        text = HEADER + text  # the tail starts on a row: give the reader its column names
    gpus: dict[int, list[Sample]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        sample = parse_sample(row)
        if sample is not None:
            kept = gpus.setdefault(sample.gpu, [])
            kept.append(sample)
            del kept[:-history]
    return gpus


_NEWEST_TAIL_BYTES = 64 * 1024  # the newest rows: enough for a screenful of history on 8 GPUs
