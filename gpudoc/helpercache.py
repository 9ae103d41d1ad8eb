"""Where the answers of gpudoc's helpers (run in the job's interpreter) are cached, and the digest
of a helper's own code that each cached answer is keyed on: a changed helper never reads an old
answer."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path


def cache_dir(environ: Mapping[str, str], name: str) -> Path:
    """``$XDG_CACHE_HOME/gpudoc/NAME`` (default ``~/.cache/gpudoc/NAME``)."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "gpudoc" / name


def code_digest(folder: Path) -> str:
    """The helper's code: every ``*.py`` file of its folder."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
