"""The interpreter of an environment tool's own environment: ``uv run``, ``conda run -n X``,
``pixi run``, ``poetry run`` in front of the job.

``python`` on gpudoc's PATH is not the one these run: the tool puts its environment first. The
tool is asked where that environment's interpreter is, in a way that never syncs, installs or
creates it (``uv sync --dry-run``, ``conda run ... python -c``, ``pixi info --json``, ``poetry env
info --path``), under a time limit; an answer that is no interpreter, a tool missing or silent, is
one line saying so, and the caller falls back to the ``python`` on PATH.

``uv run`` in a project runs the project's environment (``.venv`` at the workspace root, or
``UV_PROJECT_ENVIRONMENT``), not an active virtual environment unless ``--active``. ``uv python
find`` answers neither (it names the active environment or the nearest ``.venv``, and a system Python
where the project's environment is not created yet), and ``uv run --no-sync`` creates the
environment. ``uv sync --dry-run --offline`` names the one ``uv run`` would use ("Would use project
environment at: PATH") and changes nothing; outside a project (or with ``--no-project``) ``uv run``
takes the first Python found, which is what ``uv python find`` names.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpudoc.procs.bounded import run_bounded

TIMEOUT_S = 5.0
_MAX_ANSWER = 1 << 20  # `pixi info --json` of a large workspace is kilobytes
_EXECUTABLE = "import sys; print(sys.executable)"
_CONDAS = ("conda", "mamba", "micromamba")
_TOOLS = ("uv", "pixi", "poetry", *_CONDAS)
# Each tool's `run` options that take a value (the rest are flags); the ones gpudoc asks with.
_VALUED = {
    "uv": ("--project", "--directory", "--python", "-p", "--with", "--extra", "--group", "--package", "--env-file",
           "--index", "--index-url"),
    "conda": ("-n", "--name", "-p", "--prefix", "--cwd"),
    "pixi": ("-e", "--environment", "--manifest-path", "-m"),
    "poetry": ("--directory", "-C", "--project", "-P"),
}


@dataclass(frozen=True)
class EnvPython:
    """What the tool said: ``python`` its environment's interpreter, else ``note`` why not."""

    tool: str
    python: str | None = None
    note: str | None = None


def environment_python(argv: Sequence[str], environ: Mapping[str, str], cwd: str | None = None) -> EnvPython | None:
    """None when no environment tool runs the job; else its interpreter, or a note."""
    found = _tool_in(argv)
    if found is None:
        return None
    tool, options, program = found
    path = environ.get("PATH", os.defpath)
    where = os.path.abspath(cwd or os.getcwd())
    options.pop("--script", None)  # `uv run --script s.py`: the program says
    if tool == "uv" and _inline_script(os.path.join(where, program or "")):
        options["--script"] = program or ""  # `uv run s.py` with `# /// script` metadata: its own environment
    return _ask(tool, tuple(sorted(options.items())), where, path, tuple(sorted(environ.items())))


def _inline_script(path: str) -> bool:
    """Whether ``path`` is a Python file with inline script metadata (PEP 723's ``# /// script``)."""
    if not path.endswith(".py") or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return any(line.rstrip() == "# /// script" for line in handle.read(_MAX_ANSWER).splitlines())
    except OSError:
        return False


def _tool_in(argv: Sequence[str]) -> tuple[str, dict[str, str], str | None] | None:
    """The tool, its ``run`` options and the program it runs, when ``TOOL run`` starts the job
    (after ``env VAR=...``, ``srun``/``mpirun`` and their options: up to the program
    ``gpudoc.job.argv`` finds)."""
    from gpudoc.job.argv import parse_command

    last = min(parse_command(argv).program_index, len(argv) - 2)
    i = next((k for k in range(last + 1) if os.path.basename(argv[k]) in _TOOLS and argv[k + 1] == "run"), None)
    if i is None:
        return None
    tool = os.path.basename(argv[i])
    valued = _VALUED["conda" if tool in _CONDAS else tool]
    options: dict[str, str] = {}
    j = i + 2
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "--":
        name, eq, value = argv[j].partition("=")
        if eq:
            options[name] = value
        elif name in valued and j + 1 < len(argv):
            options[name] = argv[j + 1]
            j += 1
        else:  # a flag (uv's --active, --no-project)
            options[name] = ""
        j += 1
    if j < len(argv) and argv[j] == "--":
        j += 1
    return tool, options, argv[j] if j < len(argv) else None


@functools.lru_cache(maxsize=32)
def _ask(tool: str, options: tuple[tuple[str, str], ...], cwd: str, path: str,
         environ: tuple[tuple[str, str], ...]) -> EnvPython:
    import shutil

    said = dict(options)
    exe = shutil.which(tool, path=path)
    if exe is None:
        return EnvPython(tool, note=f"{tool} run: {tool} is not on the job's PATH, so its environment's interpreter "
                                    "is unknown; the python on PATH is assumed")
    if tool == "uv":
        found = None if "--no-project" in said else _uv_project_environment(exe, said, cwd, environ)
        if found is not None:
            return found
        request = [said[name] for name in ("--python", "-p") if name in said][:1]
        args, parse = ["python", "find", *_pass(said, "--project", "--directory"), *request], _line
    elif tool in _CONDAS:
        where = _pass(said, "-n", "--name", "-p", "--prefix")
        args, parse = ["run", *where, "python", "-c", _EXECUTABLE], _line
    elif tool == "pixi":
        args, parse = ["info", "--json", *_pass(said, "--manifest-path", "-m")], functools.partial(
            _pixi_prefix, said.get("-e") or said.get("--environment") or "default")
    else:
        args, parse = ["env", "info", "--path", *_pass(said, "--directory", "-C", "--project", "-P")], _venv_python
    asked = f"`{tool} {' '.join(args)}`"
    try:  # in a process group of its own, ended whole at the limit
        done = run_bounded([exe, *args], timeout_s=TIMEOUT_S, env=dict(environ), cwd=cwd, tail_bytes=_MAX_ANSWER)
    except OSError as exc:
        return EnvPython(tool, note=f"{tool} run: {asked} could not start ({exc.strerror}); the python on PATH "
                                    "is assumed")
    if done.timed_out:
        return EnvPython(tool, note=f"{tool} run: {asked} did not answer within {TIMEOUT_S:g} s; the python on "
                                    "PATH is assumed")
    python = parse(done.stdout) if done.returncode == 0 else None
    if python is None or not os.path.isfile(python):
        why = f"exit {done.returncode}" if done.returncode else "no interpreter in its answer"
        return EnvPython(tool, note=f"{tool} run: {asked} named no interpreter ({why}: the environment may not "
                                    "exist yet, and gpudoc does not create it); the python on PATH is assumed")
    return EnvPython(tool, python=python)


# `uv sync --dry-run`'s line on stderr naming the project environment `uv run` would use (or create).
_UV_PROJECT_ENV = re.compile(r"^Would (use|create) (project|script) environment at: (.+)$", re.MULTILINE)


def _uv_project_environment(exe: str, said: Mapping[str, str], cwd: str,
                            environ: tuple[tuple[str, str], ...]) -> EnvPython | None:
    """The project environment ``uv run`` would use, as ``uv sync --dry-run`` names it; None when
    uv names none (not a project, an older uv): ``uv python find`` answers then."""
    args = ["sync", "--dry-run", "--offline", "--no-python-downloads",
            *_pass(said, "--script", "--project", "--directory"), *[flag for flag in ("--active",) if flag in said]]
    try:
        done = run_bounded([exe, *args], timeout_s=TIMEOUT_S, env=dict(environ), cwd=cwd, tail_bytes=_MAX_ANSWER)
    except OSError:
        return None
    match = None if done.timed_out else _UV_PROJECT_ENV.search(done.stderr)
    if match is None:
        return None
    # A relative path is the folder uv ran in's: the --directory it changed to, else the job's own.
    prefix = os.path.normpath(os.path.join(cwd, said.get("--directory", ""), match.group(3).strip()))
    python = os.path.join(prefix, "bin", "python")
    if match.group(1) == "use" and os.path.isfile(python):
        return EnvPython("uv", python=python)
    return EnvPython("uv", note=f"uv run: the {match.group(2)}'s environment {prefix} is not created yet (`uv "
                                f"{' '.join(args)}`: uv run would create it, gpudoc does not); the python on PATH "
                                "is assumed")


def _pass(said: Mapping[str, str], *names: str) -> list[str]:
    return [part for name in names if name in said for part in (name, said[name])]


def _line(out: str) -> str | None:
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _venv_python(out: str) -> str | None:
    """``poetry env info --path``: the environment's folder (older releases print no newline)."""
    folder = _line(out)
    return os.path.join(folder, "bin", "python") if folder else None


def _pixi_prefix(environment: str, out: str) -> str | None:
    """``pixi info --json``: ``environments_info`` lists each environment with its ``prefix``."""
    try:
        doc = json.loads(out)
    except ValueError:
        return None
    for env in doc.get("environments_info") or () if isinstance(doc, dict) else ():
        if isinstance(env, dict) and env.get("name") == environment and env.get("prefix"):
            return os.path.join(str(env["prefix"]), "bin", "python")
    return None
