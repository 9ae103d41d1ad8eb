"""The per-user list of projects that have run records, for `gpudoc runs --all`.

``$XDG_STATE_HOME/gpudoc/projects`` (default ``~/.local/state/gpudoc/projects``): one runs
directory per line, added when a run starts there. Directories that no longer exist are dropped
when the list is read; it never holds more than ``MAX_PROJECTS`` lines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpudoc.atomic import atomic_write_text

MAX_PROJECTS = 1000


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
    known = [str(p) for p in projects(environ)]
    entry = str(Path(os.path.abspath(runs_dir)))
    if entry in known:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "\n".join([*known, entry][-MAX_PROJECTS:]) + "\n")
    except OSError:
        pass  # a read-only home: `runs --all` misses this project, the run goes on
