"""The simulation helper's answer, checked before anything reads it.

The answer comes from the job's interpreter, where the project's code (a factory, a sitecustomize)
runs first and may print anything, or from a cache file on disk: it is input. Every key the
estimate reads is checked for its type here, once, so that a wrong shape is one line naming the
key and the value (``runs[0].steady_state.peak_bytes is "1", not a count of bytes``), never a
traceback later. The protocol itself is ``gpudoc.simhelper.main``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpudoc.jsonshape import shown

# What a note or a reason from the helper may be: one line, this long at most.
MAX_REASON_CHARS = 300


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` as a note quotes it: its first line, cut to ``limit`` characters."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[:limit - 1] + "…"


def checked_answer(answer: Any, sizes: Sequence[int]) -> dict:
    """``answer`` when it has the shape the estimate reads for ``sizes`` (the micro batch sizes
    asked for); else ``ValueError`` whose message ends "the simulation helper's answer ..."."""
    if not isinstance(answer, dict):
        raise ValueError(f"is not a JSON object: {shown(answer)}")
    ok = answer.get("ok")
    if not isinstance(ok, bool):
        raise ValueError(f"has ok = {shown(ok)}, not true or false")
    if not ok:
        reason = answer.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ValueError(f"has reason = {shown(reason)}, not a text")
        return answer
    runs = answer.get("runs")
    if not isinstance(runs, list) or len(runs) != len(sizes):
        raise ValueError(f"has runs = {shown(runs)}, not a list of {len(sizes)} simulated step(s)")
    for index, run in enumerate(runs):
        where = f"runs[{index}]"
        if not isinstance(run, dict):
            raise ValueError(f"has {where} = {shown(run)}, not an object")
        _count(run.get("micro_batch_size"), f"{where}.micro_batch_size")
        for step in ("first_step", "steady_state") if index == 0 else ("steady_state",):
            _step(run.get(step), f"{where}.{step}")
    for key, kind, what in (("notes", list, "a list of texts"), ("versions", dict, "an object"),
                            ("own_adapters", bool, "true or false")):
        if key in answer and not isinstance(answer[key], kind):
            raise ValueError(f"has {key} = {shown(answer[key])}, not {what}")
    if any(not isinstance(note, str) for note in answer.get("notes", ())):
        raise ValueError(f"has notes = {shown(answer['notes'])}, not a list of texts")
    if "trainable_bytes" in answer:
        _count(answer["trainable_bytes"], "trainable_bytes")
    return {**answer, "notes": [one_line(note) for note in answer.get("notes", ())]}


def _step(step: Any, where: str) -> None:
    if not isinstance(step, dict):
        raise ValueError(f"has {where} = {shown(step)}, not a simulated step")
    _count(step.get("peak_bytes"), f"{where}.peak_bytes")
    if not isinstance(step.get("stage"), str):
        raise ValueError(f"has {where}.stage = {shown(step.get('stage'))}, not a text")
    for key in ("breakdown", "stage_peaks"):
        parts = step.get(key, {})
        if not isinstance(parts, dict):
            raise ValueError(f"has {where}.{key} = {shown(parts)}, not an object")
        for name, value in parts.items():
            _count(value, f"{where}.{key}.{name}")


def _count(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"has {where} = {shown(value)}, not a count")
