"""What a job printed of its own settings: the only proof that a changed knob reached it.

Frameworks say what they run with: the HF Trainer's banner ("Instantaneous batch size per device =
4", "Gradient Accumulation steps = 8"), Lightning's precision line ("Using bf16 Automatic Mixed
Precision (AMP)"), torchtune's resolved-config dump (``batch_size: 4``), nanoGPT's ``Overriding:
batch_size = 4``, and a ``GPUDOC_*``-reading script's own echo (``micro_batch_size=4``). Read from the
head of the log, where banners are; the values come back in the order printed (ranks repeat them).
"""

from __future__ import annotations

import re
from typing import Any

_INT = r"(\d+)"
# knob -> patterns whose first group is the value, in the job's own spelling.
PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "micro_batch_size": tuple(re.compile(p) for p in (
        r"Instantaneous batch size per device = " + _INT,
        r"\bmicro_batch_size\s*[=:]\s*" + _INT,
        r"\bper_device_train_batch_size\s*[=:]\s*" + _INT,
        r"^\s*batch_size\s*[=:]\s*" + _INT + r"\s*$",
        r"Overriding: batch_size = " + _INT,
        r"\bbatch_size=" + _INT + r"\b",
    )),
    "gradient_accumulation_steps": tuple(re.compile(p) for p in (
        r"Gradient Accumulation steps = " + _INT,
        r"\bgradient_accumulation_steps\s*[=:]\s*" + _INT,
        r"\baccumulate_grad_batches\s*[=:]\s*" + _INT,
        r"Overriding: gradient_accumulation_steps = " + _INT,
    )),
    "max_seq_len": tuple(re.compile(p) for p in (
        r"\bmax_seq_len(?:gth)?\s*[=:]\s*" + _INT,
        r"Overriding: block_size = " + _INT,
    )),
    "gradient_checkpointing": tuple(re.compile(p) for p in (
        r"\b(?:gradient|activation)_checkpointing\s*[=:]\s*(true|false|True|False)\b",
        r"\benable_activation_checkpointing\s*[=:]\s*(true|false|True|False)\b",
    )),
    "precision": tuple(re.compile(p) for p in (
        r"Using (bf16|16bit) Automatic Mixed Precision",
        r"\bprecision\s*[=:]\s*(fp32|fp16|bf16|bf16-true|fp16-true)\b",
    )),
}
_PRECISION_WORDS = {"16bit": "fp16"}
_MARKERS = ("batch", "ccumulat", "seq_len", "checkpointing", "Precision", "precision", "Overriding")


def settings_seen(text: str) -> dict[str, list[Any]]:
    """Each knob's values as the job printed them (ints, booleans, precision names), in order."""
    seen: dict[str, list[Any]] = {}
    for line in text.splitlines():
        if not any(marker in line for marker in _MARKERS):  # the cheap gate: most lines name no setting
            continue
        for knob, patterns in PATTERNS.items():
            for pattern in patterns:
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
