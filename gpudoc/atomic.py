"""Write files so that a crash or a full disk never leaves a half-written profile or config.

A write goes to a temporary file beside the target, is synced, then renamed over it. A symlink at
the target is replaced, never followed (gpudoc's own files: a planted link must not redirect a
write), unless ``follow_link``: a file the user named, such as a bound config that is a link into
a shared directory, is edited at the link's target and the link stays.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpudoc.errors import InputError


def atomic_write_text(path: Path, text: str, *, encoding: str = "utf-8", follow_link: bool = False,
                      mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode(encoding), follow_link=follow_link, mode=mode)


def atomic_write_bytes(path: Path, data: bytes, *, follow_link: bool = False, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically with permission bits ``mode``; by default an existing
    file keeps its own and a new one gets the usual ``0666 & ~umask`` (not mkstemp's private 0600)."""
    path = Path(path)
    if follow_link and path.is_symlink():
        path = path.resolve()
    if mode is None:
        try:
            mode = path.lstat().st_mode & 0o7777 if not path.is_symlink() else _new_file_mode()
        except FileNotFoundError:
            mode = _new_file_mode()
    import tempfile  # here: commands that write nothing (check) do not import it (~2 ms)

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # name the file being written, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):  # name the file being written (an immutable one), not the temporary one
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def _new_file_mode() -> int:
    # The process umask can only be read by setting it; set it straight back.
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def backup(path: Path, suffix: str = ".gpudoc.bak", *, held: Callable[[bytes], bool] | None = None) -> Path:
    """Copy the file ``path`` names (a link's target) beside it before an edit, atomically, and
    without following a link planted where the backup goes.

    The first backup is kept: after 45 -> 22 -> 11 the backup still holds 45, the file as it was
    before gpudoc's first edit (each later state is in the run records' edits). A kill during the
    copy leaves the previous backup whole (the copy is atomic).

    No edit overwrites bytes that no backup holds: with ``held`` (whether another copy of the
    file's bytes now is kept, as the run store's originals keep them), a first backup that holds
    other bytes than the file now (an earlier chain's; the user edited the file by hand since)
    refuses the edit unless ``held`` says they are kept.
    """
    path = Path(path)
    source = path.resolve() if path.is_symlink() else path
    target = path.with_name(path.name + suffix)
    if target.is_file() and not target.is_symlink():
        if held is not None:
            current = source.read_bytes()
            if target.read_bytes() != current and not held(current):
                raise InputError(f"{path}: changed since its backup {target} was made, and no backup holds what it "
                                 f"holds now: nothing was written (`gpudoc restore` first, or move {target.name} "
                                 "away to make this state the one kept)", file=str(path))
        return target
    atomic_write_bytes(target, source.read_bytes())
    os.chmod(target, source.stat().st_mode & 0o7777)
    return target


def refuse_read_only(path: Path, *, outcome: str = "nothing was written") -> None:
    """A file the user made read-only (no write bit for its owner) is their "do not edit": gpudoc,
    which replaces files by renaming a new one over them, would otherwise overwrite it whatever its
    mode. One line naming it, ending with ``outcome``; a missing file is no reason to refuse."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) and not mode & stat.S_IWUSR:
        raise InputError(f"{path}: read-only (mode {mode & 0o7777:04o}): gpudoc will not edit it (chmod u+w "
                         f"it to let gpudoc change it); {outcome}", file=str(path))


@contextmanager
def edit_lock(directory: Path, *, timeout_s: float = 30.0) -> Iterator[None]:
    """Hold gpudoc's edit lock on ``directory``: two ``fix --apply`` at once are serialised.

    The lock is an flock on the directory itself: it needs no lock file (nothing to plant, nothing
    left behind), and unlike the edited file it is never replaced by an atomic rename.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _flock(fd, timeout_s, f"another gpudoc has been editing files here for {timeout_s:g} s", directory)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextmanager
def file_lock(path: Path, *, timeout_s: float) -> Iterator[None]:
    """Hold an flock on the lock file ``path`` (made private when missing, never through a link):
    for a file replaced by atomic renames (a list many gpudocs add to), whose own inode changes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _flock(fd, timeout_s, f"another gpudoc has held its lock for {timeout_s:g} s", path)
        yield
    finally:
        os.close(fd)


def _flock(fd: int, timeout_s: float, why: str, where: Path) -> None:
    """An exclusive flock on ``fd``, waited for up to ``timeout_s`` (then ``TimeoutError``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(errno.ETIMEDOUT, why, str(where)) from None
            time.sleep(0.02)
