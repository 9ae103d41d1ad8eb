"""The per-user list of projects that have run records, for `gpudoc runs --all`.

``$XDG_STATE_HOME/gpudoc/projects`` (default ``~/.local/state/gpudoc/projects``): one runs
directory per line, added when a run starts there. Directories that no longer exist are dropped
when the list is read; it never holds more than ``MAX_PROJECTS`` lines. Many first runs start at
once (a sweep, a job array): each adds its line under a lock (``projects.lock`` beside the list),
reading the list as the one before it left it, so none replaces another's line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpudoc.atomic import atomic_write_text, file_lock

MAX_PROJECTS = 1000
# How long a run waits for another's registration before it registers anyway: a few milliseconds
# each, so only a lock held by a stopped process is ever waited out.
_LOCK_WAIT_S = 5.0


def index_path(environ: Mapping[str, str]) -> Path:
    state = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                          ".local", "state")
    return Path(state) / "gpudoc" / "projects"


def projects(environ: Mapping[str, str]) -> list[Path]:
    """The runs directories gpudoc has written to, oldest first, those that still exist."""
    try:
        lines = index_path(environ).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    seen: dict[str, None] = {}
    for line in lines:
        if line.strip():
            seen.setdefault(line.strip(), None)
    return [Path(p) for p in seen if os.path.isdir(p)]


def register(runs_dir: Path, environ: Mapping[str, str]) -> None:
    """Remember ``runs_dir`` (no-op when it is there already); never an error for the run."""
    path = index_path(environ)
    entry = str(Path(os.path.abspath(runs_dir)))
    if entry in map(str, projects(environ)):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with file_lock(path.with_name(path.name + ".lock"), timeout_s=_LOCK_WAIT_S):
                _add(path, entry, environ)
        except TimeoutError:
            _add(path, entry, environ)  # a holder that never lets go: registering unlocked beats not at all
    except OSError:
        pass  # a read-only home: `runs --all` misses this project, the run goes on


def _add(path: Path, entry: str, environ: Mapping[str, str]) -> None:
    known = [str(p) for p in projects(environ)]  # as the run before this one left it
    if entry not in known:
        atomic_write_text(path, "\n".join([*known, entry][-MAX_PROJECTS:]) + "\n")
