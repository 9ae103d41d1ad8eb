"""Which Python interpreter will run the job: the one whose torch decides the allocator name.

The one rule, for `run` (what it sets) and `fix` (what it suggests) alike: the job's command line
resolved on the JOB's PATH (its environment, not gpudoc's); ``python``/``python3.X`` directly, a
launcher script (torchrun, deepspeed, accelerate) through its ``#!`` line. Cheap on purpose: no
subprocess.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence

from gpudoc.job.argv import parse_command

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def _which(name: str, environ: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=environ.get("PATH", os.defpath))


def shebang_interpreter(path: str, environ: Mapping[str, str]) -> str | None:
    """The Python named by a script's ``#!`` line, or None when it is not a Python script."""
    if not os.path.isfile(path):
        return None  # a pipe (`<(...)`) would block, or lose the job its bytes
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env":
        args = [p for p in parts[1:] if not p.startswith("-")]
        if args and _PYTHON.match(os.path.basename(args[0])):
            return _which(args[0], environ)
        return None
    if _PYTHON.match(os.path.basename(parts[0])):
        return parts[0]
    return None


def target_python(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The interpreter that runs the job's program (after ``env``, ``srun``, ...); None when the
    command is not (visibly) Python."""
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


def _head(path: str) -> bytes:
    if not os.path.isfile(path):
        return b""  # a pipe (`<(...)`) would block, or lose the job its bytes
    try:
        with open(path, "rb") as handle:
            return handle.read(2048)
    except OSError:
        return b""
