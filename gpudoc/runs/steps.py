"""What one optimizer step of a run cost: the record's ``steps``, one owner for it.

From the probe's ``step`` events when the job was observed (step time, the allocator's running
peaks, the card's capacity as the job's own allocator sees it), else from the training framework's
own progress lines in the run's log: the HF Trainer's closing metrics line
(``{'train_runtime': ..., 'train_steps_per_second': ...}``) and its tqdm bar over the optimizer
steps, or Lightning's ``Epoch N: ...`` bar (which counts batches, not optimizer steps). A long run
keeps a bounded summary: at most ``SERIES_POINTS`` points over the run, never one per step.
"""

from __future__ import annotations

import ast
import re
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpudoc.reported import count

SERIES_POINTS = 40
LOG_WINDOW_BYTES = 4 * 2**20  # the end of the log: the closing metrics and the latest progress
_LINE_CAP = 4096
# A tqdm bar's counter and rate: " 30%|███       | 3/10 [00:01<00:03,  2.15it/s]" or "4.47s/it".
_BAR = re.compile(r"(?P<desc>[^|\r\n]*?)\s*\d{1,3}%\s*(?:\|[^|]*\|)?\s*(?P<n>\d+)/(?P<total>\d+)\s*"
                  r"\[[\d:]+<[\d:?]+,\s*(?P<rate>\d+(?:\.\d+)?)(?P<unit>it/s|s/it)")
_LIGHTNING = re.compile(r"Epoch (?P<epoch>\d+)\b")
_HF_METRICS = re.compile(r"\{'(?:train_runtime|loss)'.*\}")


def _number(value: Any) -> float | None:
    """A figure as the frameworks print it: a number, or since transformers 5 a string (``'36.27'``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None



_Point = tuple[int, "float | None", "int | None", "int | None"]  # step, seconds, peak allocated, peak reserved


def _series(points: list[_Point]) -> list[dict[str, Any]]:
    """At most ``SERIES_POINTS`` points: consecutive steps pooled, each point the last step of its
    slice, the median time and the highest peaks in it (a spike is never averaged away)."""
    if not points:
        return []
    size = -(-len(points) // SERIES_POINTS)
    out = []
    for start in range(0, len(points), size):
        chunk = points[start:start + size]
        seconds = [s for _, s, _, _ in chunk if s is not None]
        out.append({"step": chunk[-1][0], "seconds": statistics.median(seconds) if seconds else None,
                    "peak_allocated_bytes": max((a for _, _, a, _ in chunk if a is not None), default=None),
                    "peak_reserved_bytes": max((r for _, _, _, r in chunk if r is not None), default=None)})
    return out


# -- from the probe ---------------------------------------------------------------------------------

def from_probe(steps: list[dict], observed: Mapping[str, Any], total: int | None,
               other_ranks: Iterable[list[dict]] = ()) -> dict[str, Any] | None:
    """The record's ``steps`` from one rank's ``step`` events (every step of the first hundred, then
    one in a hundred, as the probe writes them); the peaks are the highest any rank reached
    (``other_ranks``: the other ranks' events), since the fullest GPU is the one that runs out."""
    if not steps:
        return None
    seconds = [float(s["seconds"]) for s in steps if isinstance(s.get("seconds"), (int, float)) and s["seconds"] > 0]
    per_step = statistics.median(seconds) if seconds else None
    samples = 1
    for knob in ("micro_batch_size", "gradient_accumulation_steps", "world_size"):
        samples *= int((observed.get(knob) or {}).get("value") or 1)
    sequence = count((observed.get("max_seq_len") or {}).get("value"))
    every = [*steps, *(event for rank in other_ranks for event in rank)]
    peaks = {key: max((count(s.get(field)) or 0 for s in every), default=0) or None
             for key, field in (("peak_allocated_bytes", "peak_allocated"), ("peak_reserved_bytes", "peak_reserved"))}
    rate = samples / per_step if per_step else None
    tokens = rate * sequence if rate and sequence else None
    points: list[_Point] = [
        (count(s.get("n")) or 0,
         float(s["seconds"]) if isinstance(s.get("seconds"), (int, float)) and s["seconds"] > 0 else None,
         count(s.get("peak_allocated")), count(s.get("peak_reserved"))) for s in steps]
    return {"count": max(p[0] for p in points), "seconds_per_step": per_step, "samples_per_second": rate,
            "tokens_per_second": tokens, **peaks,
            "capacity_bytes": next((count(s.get("capacity")) for s in steps if count(s.get("capacity"))), None),
            "total": total, "unit": "step", "source": "probe", "series": _series(points)}


# -- from the framework's own progress lines --------------------------------------------------------

def from_log(path: Path) -> dict[str, Any] | None:
    """The record's ``steps`` from the end of the run's log, when the probe saw no step."""
    from gpudoc.runs.tail import read_tail

    return from_log_text(read_tail(path, LOG_WINDOW_BYTES))


def from_log_text(text: str) -> dict[str, Any] | None:
    bars: dict[tuple[bool, int], list[tuple[int, int, float]]] = {}  # (lightning, total) -> (epoch, n, s/step)
    metrics: dict[str, float | None] = {}
    hf = False
    for line in re.split(r"[\r\n]+", text):
        line = line[:_LINE_CAP]
        found = _HF_METRICS.search(line)
        if found:
            hf = True
            try:
                said = ast.literal_eval(found.group(0))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                said = None
            if isinstance(said, dict) and "train_runtime" in said:
                metrics = {k: _number(said.get(k)) for k in
                           ("train_runtime", "train_steps_per_second", "train_samples_per_second",
                            "train_tokens_per_second", "step")}
            continue
        bar = _BAR.search(line)
        if bar is None:
            continue
        rate = float(bar.group("rate"))
        if rate <= 0:
            continue
        epoch = _LIGHTNING.search(bar.group("desc"))
        if not epoch and bar.group("desc").strip():
            continue  # a bar with a name of its own (evaluation, data loading) is not the training loop's
        seconds = 1 / rate if bar.group("unit") == "it/s" else rate
        bars.setdefault((bool(epoch), int(bar.group("total"))), []).append(
            (int(epoch.group("epoch")) if epoch else 0, int(bar.group("n")), seconds))
    lightning = [key for key in bars if key[0]]
    # HF's training bar runs first; an evaluation bar after it has no name either and comes later.
    key = lightning[0] if lightning else next(iter(bars), None)
    updates = bars.get(key, []) if key is not None else []
    if not updates and not metrics:
        return None
    per_batch = key is not None and key[0]
    total = key[1] if key is not None and not per_batch else None
    points: list[_Point] = [(epoch * (key[1] if per_batch and key else 0) + n, seconds, None, None)
                            for epoch, n, seconds in updates if n > 1]  # tqdm's first rate includes the start-up
    later = [s for _, s, _, _ in points[len(points) // 2:] if s is not None]
    per_step = statistics.median(later) if later else None
    steps_per_second = metrics.get("train_steps_per_second")
    if steps_per_second:
        per_step = 1 / steps_per_second  # the Trainer's own figure over the whole run
    step, runtime = metrics.get("step"), metrics.get("train_runtime")
    count = max((p[0] for p in points), default=0) or (int(step) if step else None)
    if count is None and runtime and steps_per_second:
        count = round(runtime * steps_per_second)
    return {"count": count, "seconds_per_step": per_step, "samples_per_second": metrics.get("train_samples_per_second"),
            "tokens_per_second": metrics.get("train_tokens_per_second"), "peak_allocated_bytes": None, "peak_reserved_bytes": None,
            "capacity_bytes": None, "total": total, "unit": "batch" if per_batch else "step",
            "source": "log:lightning" if per_batch else "log:hf-trainer" if hf else "log:tqdm",
            "series": _series(points)}


def step_figures(probed: dict[str, Any] | None, log: Path) -> dict[str, Any] | None:
    """The record's ``steps``: the probe's where it saw steps, else the log's; a total the probe
    could not learn (a hand-written loop under a tqdm bar) taken from the log's bar."""
    if probed and probed.get("count") and probed.get("total"):
        return probed
    read = from_log(log)
    if not probed or not probed.get("count"):
        return read or probed
    if read and read.get("total") and read.get("unit") == "step":
        return {**probed, "total": read["total"]}
    return probed


# -- what is left -----------------------------------------------------------------------------------

def remaining(steps: Mapping[str, Any] | None) -> tuple[int, float, float] | None:
    """``(steps left, seconds left, seconds for the whole run)`` at the measured step time, when
    the job's total is known."""
    steps = steps or {}
    total, done, per_step = count(steps.get("total")), count(steps.get("count")) or 0, steps.get("seconds_per_step")
    if not total or not isinstance(per_step, (int, float)) or per_step <= 0:
        return None
    left = max(total - done, 0)
    return left, left * per_step, total * per_step
