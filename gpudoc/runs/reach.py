"""Whether the probe can reach a job: its directory goes on the job's ``PYTHONPATH``, so a command
that resets that variable, or a Python that ignores it, runs unobserved. Said once before the
launch, from the command line (certain) or from the text of a shell script the command runs (a
``bash run.sh`` whose script exports its own ``PYTHONPATH``: the probe may not reach the job);
nothing else about the job changes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SHELLS = ("sh", "bash", "dash", "zsh", "ksh")
SCRIPT_CAP_BYTES = 64 * 1024  # a wrapper script's head: where it sets up the environment
# A line of a shell script that leaves the job without gpudoc's PYTHONPATH: `env -i`, `unset
# PYTHONPATH`, an assignment that does not keep the old value ($PYTHONPATH), a Python started with
# -I or -E.
_RESETS = re.compile(r"""
    \benv\s+(?:-[A-Za-z]*i[A-Za-z]*|--ignore-environment|-)(?=\s|$)
  | \bunset\s+(?:-v\s+)?PYTHONPATH\b
  | (?<![\w$])PYTHONPATH=(?!\S*PYTHONPATH)
  | \bpython[\d.]*(?:\s+-[A-Za-z]+)*?\s+-[A-Za-z]*[IE][A-Za-z]*(?=\s|$)
""", re.VERBOSE)


def unreachable(argv: list[str]) -> str | None:
    """Why the probe cannot see this job, when its command says so: a Python started with ``-I`` or
    ``-E`` ignores ``PYTHONPATH``; ``env -i``, ``-u PYTHONPATH`` or ``PYTHONPATH=...`` resets it."""
    if argv and os.path.basename(argv[0]) == "env":
        return _env_resets(argv) or unreachable(_after_env(argv))
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return None
    for arg in argv[1:]:
        if not arg.startswith("-") or arg == "-" or arg.startswith(("-c", "-m")):
            return None  # the script, or code, begins: what follows is the job's
        if arg[1:2] != "-" and ("I" in arg[1:] or "E" in arg[1:]):
            return f"{argv[0]} {arg} ignores PYTHONPATH: the probe cannot observe this job (nothing else changes)"
    return None


def _env_resets(argv: list[str]) -> str | None:
    options = argv[1:len(argv) - len(_after_env(argv))]
    said = [f"{a} {b}" for a, b in zip(options, options[1:]) if a in ("-u", "--unset") and b == "PYTHONPATH"] + [
        "PYTHONPATH=..." if o.startswith("PYTHONPATH=") else o for o in options if o.startswith("PYTHONPATH=")
        or o in ("-i", "--ignore-environment", "-", "-uPYTHONPATH", "--unset=PYTHONPATH")]
    return f"env {said[0]} resets PYTHONPATH: the probe cannot observe this job (nothing else changes)" if said else None


def _after_env(argv: list[str]) -> list[str]:
    """The command ``env`` runs: past its options and ``NAME=value`` settings."""
    rest = argv[1:]
    while rest and (rest[0].startswith("-") or "=" in rest[0]):
        rest = rest[2:] if rest[0] in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string") else rest[1:]
    return rest


def wrapper_resets(argv: list[str], cwd: Path | None) -> str | None:
    """Why a shell script the command runs (``bash run.sh``, ``sh -c '...'``, ``./run.sh``) may keep
    the probe from the job: the first line of its text that resets ``PYTHONPATH`` or starts Python
    ignoring it. Read, not run: a script's branches may never take that line, hence "may"."""
    if argv and os.path.basename(argv[0]) == "env":
        return wrapper_resets(_after_env(argv), cwd)
    script = _script(argv, cwd)
    if script is None:
        return None
    name, text = script
    for number, line in enumerate(text.splitlines(), 1):
        code = line.strip()
        if code and not code.startswith("#") and _RESETS.search(code):
            return (f"{name}, line {number} ({code[:80]}), resets PYTHONPATH or starts Python ignoring it: "
                    "the probe may not observe this job (nothing else changes)")
    return None


def _script(argv: list[str], cwd: Path | None) -> tuple[str, str] | None:
    """(its name, its text) of the shell script ``argv`` runs, or None."""
    if not argv:
        return None
    if os.path.basename(argv[0]) in SHELLS:
        rest = argv[1:]
        while rest and rest[0].startswith(("-", "+")):
            if rest[0] == "-c":
                return (f"{argv[0]} -c", rest[1]) if len(rest) > 1 else None
            rest = rest[2:] if rest[0] in ("-o", "+o") else rest[1:]
        return _read(rest[0], cwd) if rest else None
    found = _read(argv[0], cwd) if os.sep in argv[0] or argv[0].endswith(".sh") else None
    if found is None or not (argv[0].endswith(".sh") or _shell_shebang(found[1])):
        return None
    return found


def _shell_shebang(text: str) -> bool:
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and any(os.path.basename(word) in SHELLS for word in first[2:].split()[:2])


def _read(path: str, cwd: Path | None) -> tuple[str, str] | None:
    where = Path(path) if cwd is None else Path(cwd) / path
    if not where.is_file():
        return None  # `bash <(...)`, a FIFO: reading would block, or take the bytes the shell should get
    try:
        with open(where, "rb") as script:
            return path, script.read(SCRIPT_CAP_BYTES).decode("utf-8", "replace")
    except OSError:  # not a file gpudoc can read: nothing said
        return None
