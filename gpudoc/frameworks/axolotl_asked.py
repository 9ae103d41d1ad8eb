"""axolotl's own reading of a training command, asked in the job's interpreter
(``gpudoc/readhelper/axolotl_cli.py``): ``axolotl train``'s click options (a value option takes
the next token, ``--x/--no-x`` none), or fire's parse of ``-m axolotl.cli.train``'s flags, set
over the YAML's keys as ``load_cfg`` sets them, then its pydantic config schema (its defaults by
installed release, its validators). A command axolotl refuses is said with axolotl's reason.

gpudoc's own reader has already placed each knob (the YAML, an option after it, the DeepSpeed JSON);
the answer settles the values (``asked.settle``). It reads alone where axolotl is not importable,
and says so.
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

# Its config module imports torch, transformers and peft: about 10 s of CPU, more wall time on a
# machine whose cores other jobs share.
TIMEOUT_S = 120.0
_COUNTS = (("micro_batch_size", "micro_batch_size"), ("gradient_accumulation_steps", "gradient_accumulation_steps"),
           ("max_seq_len", "sequence_len"))


def entry(job: JobCommand) -> str | None:
    """``cli`` for ``axolotl train CFG``, ``module`` for ``-m axolotl.cli.train CFG`` (fire's); None otherwise."""
    program = os.path.basename(job.script or "")
    if program == "axolotl" and job.script_args[:1] == ["train"]:
        return "cli"
    return "module" if program == "axolotl.cli.train" else None


def knobs(config: Mapping[str, Any]) -> Iterator[tuple[str, Any, tuple[str, ...]]]:
    """(knob, value, the keys that say it) as axolotl's validated config holds them."""
    for knob, key in _COUNTS:
        if config.get(key) is not None:
            yield knob, knob_value(knob, config[key]), (key,)
    if isinstance(config.get("gradient_checkpointing"), bool):
        yield "gradient_checkpointing", config["gradient_checkpointing"], ("gradient_checkpointing",)
    bf16, fp16 = config.get("bf16"), config.get("fp16")
    if bf16 != "auto":  # "auto": bf16 where the job's GPU has it, else fp16, decided at launch
        yield "precision", "bf16" if bf16 is True else "fp16" if fp16 is True else "fp32", ("bf16", "fp16")
    if config.get("adapter") in ("lora", "qlora") and config.get("lora_r") is not None:
        yield "lora_rank", knob_value("lora_rank", config["lora_r"]), ("lora_r",)


def settle(job: JobCommand, cwd: Path, r: JobReading, config: str, name: str) -> None:
    """axolotl's values over gpudoc's reading ``r`` of the same command."""
    how = entry(job)
    if how is None:
        return
    args = job.script_args
    after = args[args.index(config) + 1:]
    after = after[:after.index("--")] if "--" in after else after  # the launcher's own (``axolotl.launches``)
    python = target_python(job.argv, os.environ, str(cwd))
    try:
        if python is None:
            raise asked.Unanswered("the job's interpreter was not found")
        answer = asked.ask({"framework": "axolotl", "entry": how, "config": config, "args": after}, python=python,
                           cwd=cwd, files=[cwd / config], timeout_s=TIMEOUT_S)
    except asked.Unanswered as exc:
        r.notes.append(f"{name}: axolotl's own CLI and config schema could not be asked ({exc}); read by gpudoc's "
                       "own reader")
        return
    settings: Mapping[str, Any] = answer.get("config") or {}
    lora = settings.get("adapter") in ("lora", "qlora")
    reader = "the options of its `axolotl train`" if how == "cli" else "fire's parse of -m axolotl.cli.train's flags"
    asked.settle(r, answer, knobs(settings), name, package="axolotl", how=f"{reader} set over the YAML, then its "
                 "config schema", unused={} if lora else {"lora_rank": "no adapter: the whole model trains"})
