"""What a job printed of its own settings: the only proof that a changed knob reached it.

Frameworks say what they run with: the HF Trainer's banner ("Instantaneous batch size per device =
4", "Gradient Accumulation steps = 8"), Lightning's precision line ("Using bf16 Automatic Mixed
Precision (AMP)"), torchtune's resolved-config dump (``batch_size: 4``), nanoGPT's ``Overriding:
batch_size = 4``, and a ``GPUDOC_*``-reading script's own echo (``micro_batch_size=4``). Read from the
head of the log, where banners are; the values come back in the order printed (ranks repeat them).
"""

from __future__ import annotations

import functools
import re
from typing import Any

_INT = r"(\d+)"
# What a script's own echo says (``micro_batch_size=4``, a ``GPUDOC_*``-reading script's), as
# (knob, pattern whose first group is the value); each framework's banners are its ``echo``.
_OWN: tuple[tuple[str, str], ...] = (
    ("micro_batch_size", r"\bmicro_batch_size\s*[=:]\s*" + _INT),
    ("micro_batch_size", r"\bbatch_size=" + _INT + r"\b"),
    ("gradient_accumulation_steps", r"\bgradient_accumulation_steps\s*[=:]\s*" + _INT),
    ("max_seq_len", r"\bmax_seq_len(?:gth)?\s*[=:]\s*" + _INT),
    ("gradient_checkpointing", r"\b(?:gradient|activation)_checkpointing\s*[=:]\s*(true|false|True|False)\b"),
    ("precision", r"\bprecision\s*[=:]\s*(fp32|fp16|bf16|bf16-true|fp16-true)\b"),
)


@functools.cache
def patterns() -> dict[str, tuple[re.Pattern[str], ...]]:
    """knob -> the patterns whose first group is its value, in the job's own spelling: the
    frameworks' banners first (``gpudoc.frameworks``), then a script's own echo."""
    from gpudoc.frameworks.registry import ADAPTERS  # only when a log is read for settings

    found: dict[str, list[re.Pattern[str]]] = {}
    for knob, pattern in (*(line for adapter in ADAPTERS for line in adapter.echo), *_OWN):
        found.setdefault(knob, []).append(re.compile(pattern))
    return {knob: tuple(compiled) for knob, compiled in found.items()}
_PRECISION_WORDS = {"16bit": "fp16"}
_MARKERS = ("batch", "ccumulat", "seq_len", "checkpointing", "Precision", "precision", "Overriding")


def settings_seen(text: str) -> dict[str, list[Any]]:
    """Each knob's values as the job printed them (ints, booleans, precision names), in order."""
    seen: dict[str, list[Any]] = {}
    for line in text.splitlines():
        if not any(marker in line for marker in _MARKERS):  # the cheap gate: most lines name no setting
            continue
        for knob, knob_patterns in patterns().items():
            for pattern in knob_patterns:
                found = pattern.search(line)
                if found:
                    seen.setdefault(knob, []).append(_value(knob, found.group(1)))
                    break
    return seen


def _value(knob: str, text: str) -> Any:
    if knob == "gradient_checkpointing":
        return text.lower() == "true"
    if knob == "precision":
        return _PRECISION_WORDS.get(text, text)
    return int(text)
