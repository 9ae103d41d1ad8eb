"""torchtune's own reading of ``--config``: ``tune run``'s lookup (one of its built-in configs by name,
then a file) and its recipes' merge of the ``key=value`` overrides, asked in the job's interpreter.

A built-in config sits in the installed package: gpudoc never edits it, so a knob read from it is
changed with an override on the command line, as one the command sets is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoc.configvalues import MISSING, get
from gpudoc.frameworks import asked
from gpudoc.frameworks.asked import Unanswered
from gpudoc.job.argv import JobCommand
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import JobReading


def overrides(args: list[str]) -> list[str]:
    """The recipe's ``key=value`` / ``~key`` overrides (its parser leaves them to torchtune's merge)."""
    out, skip = [], False
    for tok in args:
        if skip:
            skip = False
        elif tok == "--config":
            skip = True
        elif not tok.startswith("-") and ("=" in tok or tok.startswith("~")):
            out.append(tok)
    return out


def needed(cwd: Path, config: str, keys: dict[str, str]) -> bool:
    """Whether only torchtune can say: ``--config`` is no file here (one of its built-in configs, by
    name), or a knob's key in the file is an interpolation. A file of plain values reads the same
    by hand, and asking costs a torch import (seconds)."""
    local = cwd / config
    if not local.is_file():
        return True
    try:
        text = local.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False  # the hand-written reader says why
    return "${" in text and any(f"{key.rsplit('.', 1)[-1]}:" in line and "${" in line
                                for line in text.splitlines() for key in keys)


def loaded(job: JobCommand, cwd: Path, r: JobReading, config: str, keys: dict[str, str],
           value_of: Callable[[str, Any], Any]) -> tuple[Any, str] | None:
    """torchtune's merged config read into ``r`` for ``keys`` (its key -> gpudoc's knob); returns
    (optimizer_in_bwd, where it is said), or None when gpudoc's own reader reads it: the file is read as
    written. Raises ``Unanswered`` when torchtune could not be asked."""
    if not needed(cwd, config, keys):
        return None
    for tok in overrides(job.script_args):  # a value the job would refuse is refused before asking
        key, _, value = tok.partition("=")
        if key in keys:
            JobReading().set(keys[key], value_of(keys[key], value), "argv", key)
    python = target_python(job.argv, os.environ, str(cwd))
    said = overrides(job.script_args)
    local = cwd / config
    if python is None:
        raise Unanswered("the job's interpreter was not found")
    answer = asked.ask({"framework": "torchtune", "config": config, "recipe": job.script, "overrides": said,
                        "cwd": str(cwd.resolve())}, python=python, cwd=cwd, files=[local] if local.is_file() else [])
    data = answer.get("config") or {}
    builtin = bool(answer.get("builtin"))
    command_keys = {tok.split("=", 1)[0].lstrip("~") for tok in said}
    for key, knob in keys.items():
        value = get(data, tuple(key.split(".")))
        typed = value_of(knob, value) if value is not MISSING else None
        if typed is None:
            continue
        if key in command_keys or builtin:
            r.set(knob, typed, "argv", key)
        else:
            r.set(knob, typed, "file", key, config)
    r.config_data.append((config, data))
    if builtin:
        version = (answer.get("versions") or {}).get("torchtune", "?")
        r.notes.append(f"torchtune: --config {config} is torchtune {version}'s built-in config, read through its "
                       "config loader; its values are changed with overrides on the command line, never in the "
                       "installed file")
    in_bwd = get(data, ("optimizer_in_bwd",))
    where = "the command" if "optimizer_in_bwd" in command_keys else config
    return (in_bwd, where) if in_bwd is not MISSING else (None, where)
