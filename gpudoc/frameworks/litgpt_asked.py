"""LitGPT's own parser asked for a training command's settings, in the job's interpreter
(``gpudoc/readhelper/jsonargs.py``): the command's ``setup()`` through jsonargparse, so its defaults
are the installed release's, then ``--config`` files and flags in command-line order.

Where a setting lives decides how a changed value is written: the command's flag; the one file that
sets it; a key that several layers set (a file a later layer overrides), written as a flag, never
in a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpudoc.frameworks import asked
from gpudoc.job.argv import JobCommand
from gpudoc.job.interpreter import target_python
from gpudoc.job.sources import cli_options

TIMEOUT_S = 60.0  # a training command's module imports torch and Lightning: seconds, more on a busy machine

Said = dict[str, tuple[Any, str, str, "str | None"]]


def settings(job: JobCommand, cwd: Path, keys: tuple[str, ...]) -> tuple[Said, list[str]]:
    """key -> (value, kind, where, file) for ``keys`` as LitGPT parses the command, and the notes to
    add. (The answer also holds the accumulation LitGPT's own ``TrainArgs`` counts, which the tests
    hold equal to the adapter's arithmetic.) Raises ``Unanswered``."""
    command, *args = job.script_args
    configs = [cwd / value for _, name, value in cli_options(args) if name == "--config"]
    python = target_python(job.argv, os.environ, str(cwd))
    if python is None:
        raise asked.Unanswered("the job's interpreter was not found")
    answer = asked.ask({"framework": "litgpt", "command": command, "args": args, "cwd": str(cwd.resolve())},
                       python=python, cwd=cwd, files=[c for c in configs if c.is_file()], timeout_s=TIMEOUT_S)
    config = answer.get("config") or {}
    setters: dict[str, list[int]] = answer.get("setters") or {}
    layers: list[dict[str, Any]] = answer.get("layers") or []
    version = (answer.get("versions") or {}).get("litgpt", "?")
    said: Said = {}
    by_flag = []
    for key in keys:
        value = _get(config, key)
        if key not in setters:
            said[key] = (value, "default", "litgpt", None)
            continue
        last = layers[setters[key][-1]]
        if last["kind"] == "flag":
            said[key] = (value, "argv", str(last["flag"]), None)
        elif len(setters[key]) == 1 and last.get("file"):
            said[key] = (value, "file", "", str(last["arg"]))
        else:
            said[key] = (value, "argv", f"--{key}", None)
            by_flag.append(f"{key} (set by {' then '.join(str(layers[i].get('arg')) for i in setters[key])})")
    notes = [f"litgpt: read by LitGPT {version}'s own parser (litgpt {command}'s defaults, then each --config and flag)"]
    if by_flag:
        notes.append("litgpt: changed with a flag, not in a file a later layer overrides: " + ", ".join(by_flag))
    return said, notes


def _get(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config
