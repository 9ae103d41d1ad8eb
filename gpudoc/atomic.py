"""Write files so that a crash or a full disk never leaves a half-written profile or config."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str, *, encoding: str = "utf-8") -> None:
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``.

    The file's permission bits are kept when it already exists.
    """
    path = Path(path)
    mode = None
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def backup(path: Path, suffix: str = ".gpudoc.bak") -> Path:
    """Copy ``path`` beside itself before an edit; the latest backup wins."""
    path = Path(path)
    target = path.with_name(path.name + suffix)
    shutil.copy2(path, target)
    return target
