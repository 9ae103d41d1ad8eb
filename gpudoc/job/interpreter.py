"""Which Python interpreter will run the job: the one whose torch decides the allocator name.

The one rule, for `run` (what it sets) and `fix` (what it suggests) alike: the job's command line
resolved on the JOB's PATH (its environment, not gpudoc's); ``python``/``python3.X`` directly, a
launcher script (torchrun, deepspeed, accelerate) through its ``#!`` line. Cheap on purpose: no
subprocess, except to ask an environment tool in front of the job (``uv run``, ``conda run``,
``pixi run``, ``poetry run``: ``gpudoc.job.envtools``) which interpreter its environment has.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from gpudoc.job.argv import parse_command
from gpudoc.job.envtools import environment_python
from gpudoc.job.installed import shebang_interpreter
from gpudoc.job.installed import which_on_path as _which

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def target_python(argv: Sequence[str], environ: Mapping[str, str], cwd: str | None = None) -> str | None:
    """The interpreter that runs the job's program (after ``env``, ``srun``, ...; an environment
    tool's own when one runs it); None when the command is not (visibly) Python."""
    tool = environment_python(argv, environ, cwd)
    if tool is not None and tool.python is not None:
        return tool.python
    first = parse_command(argv).program
    if first is None:
        return None
    name = os.path.basename(first)
    path = first if os.sep in first else _which(first, environ)
    if _PYTHON.match(name):
        return path
    if path is None:
        return None
    found = shebang_interpreter(path, environ)
    if found:
        return found
    # A version-manager shim (a shell script in front of the real launcher): the interpreter of
    # the same name on the job's PATH goes through the same shim to the same environment.
    if b"pyenv" in _head(path) or b"asdf" in _head(path):
        return _which("python3", environ) or _which("python", environ)
    return None


def interpreter_note(argv: Sequence[str], environ: Mapping[str, str], cwd: str | None = None) -> str | None:
    """One line when an environment tool runs the job and its interpreter could not be told."""
    tool = environment_python(argv, environ, cwd)
    return tool.note if tool is not None else None


def _head(path: str) -> bytes:
    if not os.path.isfile(path):
        return b""  # a pipe (`<(...)`) would block, or lose the job its bytes
    try:
        with open(path, "rb") as handle:
            return handle.read(2048)
    except OSError:
        return b""
