"""A run's ``gpu.csv`` read back as a timeline: memory per GPU over time, in bounded memory.

The launcher writes one row per GPU per second (``gpudoc.launch.watch``); a twelve-hour run on
eight GPUs is a few hundred thousand rows. The reader keeps at most ``width`` buckets per GPU
(the highest value in each, since a peak is what an OOM is about), whatever the file's size.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path


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
            parsed = _parse(row)
            if parsed is None:
                continue
            stamp, gpu, used, total = parsed
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
                parsed = _parse(row)
                if parsed is None:
                    continue
                first = parsed[0] if first is None else min(first, parsed[0])
                last = parsed[0] if last is None else max(last, parsed[0])
    except OSError:
        return None
    return (first, last) if first is not None and last is not None else None


def _parse(row: dict[str, str]) -> tuple[float, int, int, int] | None:
    try:
        stamp = float(row["time"])
        gpu = int(row["gpu_index"])
        used = int(row["memory_used_bytes"])
    except (KeyError, TypeError, ValueError):
        return None  # a row cut short (the run was killed mid-write) or a header of another tool
    try:
        total = int(row.get("memory_total_bytes") or 0)
    except ValueError:
        total = 0
    return stamp, gpu, used, total
