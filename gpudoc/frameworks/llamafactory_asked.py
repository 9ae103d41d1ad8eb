"""LLaMA-Factory's own parsing of ``llamafactory-cli train ARGS``, asked in the job's interpreter
(``gpudoc/readhelper/hf.py``): its ``read_args`` (the YAML, ``key=value`` merged over it by
OmegaConf) and its HfArgumentParser over its argument dataclasses, so a key the file leaves out is
the installed release's default and a value is the one its dataclasses take (``lora_target: all``,
``pure_bf16``, the Trainer's bf16/fp16).

gpudoc's own reader has already placed each knob (the file, an override, the DeepSpeed JSON the file
names); the answer settles the values, and the defaults where neither says one. The hand-written
reader alone answers when LLaMA-Factory cannot be asked, and says so.
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

# Its argument dataclasses import torch, transformers, peft and datasets: about 12 s of CPU, more
# wall time on a machine whose cores other jobs share.
TIMEOUT_S = 120.0
_COUNTS = (("micro_batch_size", "per_device_train_batch_size"),
           ("gradient_accumulation_steps", "gradient_accumulation_steps"), ("max_seq_len", "cutoff_len"))
_PRECISION = ("pure_bf16", "bf16", "fp16")


def ask(job: JobCommand, cwd: Path, config: str) -> dict[str, Any]:
    """LLaMA-Factory's answer for the command's arguments after ``train``. Raises ``Unanswered``."""
    python = target_python(job.argv, os.environ, str(cwd))
    if python is None:
        raise asked.Unanswered("the job's interpreter was not found")
    args = job.script_args[1:]
    return asked.ask({"framework": "llama-factory", "args": args}, python=python, cwd=cwd,
                     files=[cwd / config], timeout_s=TIMEOUT_S)


def knobs(fields: Mapping[str, Any]) -> Iterator[tuple[str, Any, tuple[str, ...]]]:
    """(knob, value, the fields that say it) as LLaMA-Factory's parsed arguments hold them."""
    for knob, field in _COUNTS:
        if fields.get(field) is not None:
            yield knob, knob_value(knob, fields[field]), (field,)
    if isinstance(fields.get("disable_gradient_checkpointing"), bool):
        yield "gradient_checkpointing", not fields["disable_gradient_checkpointing"], ("disable_gradient_checkpointing",)
    # pure_bf16 trains bf16 weights too; the Trainer's bf16 and fp16 are mixed precision.
    precision = "bf16-true" if fields.get("pure_bf16") else "bf16" if fields.get("bf16") else \
        "fp16" if fields.get("fp16") else "fp32"
    yield "precision", precision, _PRECISION
    if fields.get("finetuning_type") == "lora" and fields.get("lora_rank") is not None:
        yield "lora_rank", knob_value("lora_rank", fields["lora_rank"]), ("lora_rank",)


def settle(job: JobCommand, cwd: Path, r: JobReading, config: str, name: str) -> None:
    """LLaMA-Factory's values over gpudoc's reading ``r`` of the same command (``asked.settle``)."""
    try:
        answer = ask(job, cwd, config)
    except asked.Unanswered as exc:
        r.notes.append(f"{name}: LLaMA-Factory's own parser could not be asked ({exc}); read by gpudoc's own reader")
        return
    fields: Mapping[str, Any] = answer.get("fields") or {}
    tuning = fields.get("finetuning_type")
    asked.settle(r, answer, knobs(fields), name, package="llamafactory",
                 how="its own parser (its YAML, the key=value overrides merged over it, its argument dataclasses' "
                     "defaults)",
                 unused={} if tuning == "lora" else {"lora_rank": f"finetuning_type is {tuning}: no LoRA is trained"})
