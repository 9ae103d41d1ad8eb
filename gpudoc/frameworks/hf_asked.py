"""HF's and TRL's own argument parsing of the job's command, asked in the job's interpreter.

transformers' ``HfArgumentParser`` (the HF Trainer job) or the ``trl`` CLI's ``TrlParser`` parses the
command's flags and its args file as the job will, and the training arguments it builds (after their
``__post_init__``: TRL's bf16 unless fp16, the checkpointing flag's old alias) are the job's values; a
knob no flag or file sets is the installed release's default. The flags the parser declares are the
only ones gpudoc writes. A script's own dataclasses (its ``ModelArguments``) are the job's code,
never imported: their flags stay gpudoc's own reading.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpudoc.frameworks import asked
from gpudoc.job.argv import JobCommand
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import knob_value

# Importing TrainingArguments imports torch, and peft where installed (about 10 s of CPU): more than
# Hydra's compose needs, on a machine whose cores the other jobs share.
TIMEOUT_S = 60.0
# Each knob's fields of the training arguments, the current name first (transformers 5 reads
# activation_checkpointing, gradient_checkpointing its old alias; SFT's max_seq_length before TRL 0.17).
_FIELDS = (("micro_batch_size", ("per_device_train_batch_size",)),
           ("gradient_accumulation_steps", ("gradient_accumulation_steps",)),
           ("gradient_checkpointing", ("activation_checkpointing", "gradient_checkpointing")),
           ("max_seq_len", ("max_length", "max_seq_length")))


def ask(job: JobCommand, cwd: Path, r: JobReading, request: Mapping[str, Any], files: list[Path],
        who: str) -> dict[str, Any] | None:
    """The parser's answer, its declared flags kept on ``r``; None (with one note saying why, and
    that gpudoc's own reader reads instead) when it could not be asked."""
    python = interpreter(job, cwd)
    try:
        if python is None:
            raise asked.Unanswered("the job's interpreter was not found")
        answer = asked.ask(request, python=python, cwd=cwd, files=files, timeout_s=TIMEOUT_S)
    except asked.Unanswered as exc:
        r.notes.append(f"{who} could not be asked ({exc}); read by gpudoc's own reader")
        return None
    r.declared = frozenset(answer.get("declared") or ())
    return answer


def interpreter(job: JobCommand, cwd: Path) -> str | None:
    """The job's interpreter: a console script's ``#!`` line, or the environment ``uv run`` / ``conda run``
    runs it in (asked of the tool), never the ``trl`` or ``python`` on gpudoc's own PATH."""
    return target_python(job.argv, os.environ, str(cwd))


def knobs(answer: Mapping[str, Any]) -> Iterator[tuple[str, Any, tuple[str, str] | None]]:
    """(knob, value, where the command set it: ("argv", flag) or ("file", key); None: the default)."""
    fields: Mapping[str, Any] = answer.get("fields") or {}
    given = {field: (str(said[0]), str(said[1])) for field, said in (answer.get("given") or {}).items()}
    for knob, names in _FIELDS:
        present = [n for n in names if n in fields]
        if not present or fields[present[0]] is None:
            continue
        yield knob, knob_value(knob, fields[present[0]]), next((given[n] for n in present if n in given), None)
    # Mixed precision as __post_init__ left it: fp16 wins; where it is said, the flag that turned it on.
    precision = "fp16" if fields.get("fp16") else "bf16" if fields.get("bf16") else "fp32"
    said = [n for n in ("fp16", "bf16") if fields.get(n) and n in given] or [n for n in ("fp16", "bf16") if n in given]
    yield "precision", precision, given[said[0]] if said else None


def place(r: JobReading, answer: Mapping[str, Any], kind: str, framework: str, config: str | None) -> None:
    """The answer's knobs of one ``kind`` into ``r``: "default" (the installed release's, where the
    command says nothing), "file" (the args file's keys) or "argv" (the flags)."""
    for knob, value, said in knobs(answer):
        if kind == "default":  # every knob, in the framework's order; a file or a flag replaces it after
            r.set(knob, value, "default", framework)
        elif said is not None and said[0] == kind == "file":
            r.set(knob, value, "file", said[1], config)
        elif said is not None and said[0] == kind == "argv":
            r.set(knob, value, "argv", said[1])


def declared(ctx_declared: frozenset[str] | None, flag: str) -> bool:
    """Whether the job's parser takes ``flag`` (True where it was not asked)."""
    return ctx_declared is None or flag in ctx_declared


def undeclared(ctx_declared: frozenset[str] | None, flags: tuple[str, ...]) -> str | None:
    """The first of ``flags`` the job's parser does not take; None when it takes them all (or was not asked)."""
    return next((f for f in flags if not declared(ctx_declared, f)), None)
