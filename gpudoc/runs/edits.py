"""The chain of gpudoc's edits of the user's files, kept so that `gpudoc restore` can undo them.

Every edit gpudoc makes to a profile or a bound config file is an entry in a run record: the
launch-time edits of a run in its ``file_edits``, the edits `fix --apply` and `--retry-oom` make
after a failed run in that run's ``applied_edits``. Each entry says what it changed from what
(``changes``, ``diff``) and carries the fingerprints of the file's bytes before and after
(``old_sha256``, ``new_sha256``; None for a file that did not exist). The bytes before each edit
are kept in the store's ``originals/`` folder, named by their fingerprint, so the state before the
first edit of a chain is there even after later edits and whatever ``.gpudoc.bak`` holds. An edit no
run record lists (`fix --log --apply`, `profile new --force`) keeps the bytes its first backup does
not hold in ``originals/unlisted/``, pruned by the records' own rule (``gpudoc.runs.retention``).

A file's chain of edits runs back from its newest edit through each edit whose result the next
one started from; a change by hand in between ends it (what the user wrote is theirs to keep).
"""

from __future__ import annotations

import errno
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RunStore

ORIGINALS = "originals"
UNLISTED = "unlisted"  # inside ORIGINALS: the bytes before edits that no run record lists


def fingerprint(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes (a link's target's), None when there is no file."""
    try:
        return Path(path).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def keep_original(store: RunStore, data: bytes, *, listed: bool = True) -> str:
    """Keep ``data`` (a file's bytes before an edit) in the store's ``originals/`` (``listed``: a run
    record lists the edit; else in ``unlisted_folder``, where its age counts from now); return its
    fingerprint. Written atomically and privately (0600); a link planted at the name is replaced, never
    followed."""
    digest = str(fingerprint(data))
    store.ensure()  # the store's .gitignore covers the originals too
    folder = store.home / ORIGINALS
    for level in (folder,) if listed else (folder, unlisted_folder(store.home)):
        try:
            level.mkdir(parents=True, exist_ok=True, mode=0o700)
        except FileExistsError:
            pass  # a file in its place: said below
        if level.is_symlink() or not level.is_dir():  # planted: the write would land wherever it points
            raise OSError(errno.ENOTDIR, "not a folder of gpudoc's own (a link, or a file)", str(level))
        folder = level
    target = folder / digest
    if not (target.is_file() and not target.is_symlink() and fingerprint(target.read_bytes()) == digest):
        atomic_write_bytes(target, data, mode=0o600)
    elif not listed:
        os.utime(target, follow_symlinks=False)  # kept again: pruned by this keep's age, not the first's
    return digest


def unlisted_folder(home: Path) -> Path:
    """Where the bytes before an edit that no run record lists are kept."""
    return Path(home) / ORIGINALS / UNLISTED


def original(home: Path, digest: str, beside: Path) -> bytes | None:
    """The bytes whose fingerprint is ``digest``: from ``originals/`` (or ``originals/unlisted/``),
    else the ``.gpudoc.bak`` beside the file when it holds them (content checked: a planted file or
    link proves nothing)."""
    for candidate in (Path(home) / ORIGINALS / digest, unlisted_folder(home) / digest,
                      beside.with_name(beside.name + ".gpudoc.bak")):
        data = read_bytes(candidate) if candidate.is_file() else None
        if data is not None and fingerprint(data) == digest:
            return data
    return None


def entry(path: Path, before: bytes | None, after: bytes | None, **extra: Any) -> dict[str, Any]:
    """One edit as run records keep it."""
    return {"path": str(path), "old_sha256": fingerprint(before), "new_sha256": fingerprint(after),
            "at": time.time(), **extra}


@contextmanager
def remembered_edit(store: RunStore, record: RunRecord | None, path: Path, **extra: Any) -> Iterator[None]:
    """Around a write of the profile ``path`` on behalf of the failed run ``record`` (`fix --apply`,
    `--retry-oom`): keep the bytes before, and list the edit in the record's ``applied_edits``."""
    from gpudoc.errors import GpudocError

    path = Path(os.path.abspath(path))
    before = read_bytes(path)
    # With no run to list it (`fix --log`), the bytes are kept only when the backup does not hold
    # them (``held_or_kept``): an edit that fails leaves no run store behind.
    if before is not None and record is not None:
        try:
            keep_original(store, before)
        except (GpudocError, OSError):
            pass  # an unwritable store: the first .gpudoc.bak must hold them, or the edit is refused
    yield
    after = read_bytes(path)
    if record is None or after == before:
        return
    record.applied_edits.append(entry(path, before, after, **extra))
    store.save(record)


@dataclass(frozen=True)
class Edit:
    """One edit of one file, as read back from a record."""

    path: str  # absolute
    old_sha256: str | None
    new_sha256: str | None
    at: float
    run_id: str
    changes: tuple[dict, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "old_sha256": self.old_sha256, "new_sha256": self.new_sha256,
                "changes": [dict(c) for c in self.changes]}


def record_edits(record: RunRecord) -> list[Edit]:
    """Every edit a record lists that carries fingerprints (older records' edits cannot be undone).
    A `gpudoc tune` trial's own edits are none of the user's files (it edited copies of its own, gone
    with its working directory); what `tune --apply` wrote through it is."""
    found = []
    launched = () if record.trial_of else record.file_edits
    for doc in (*launched, *getattr(record, "applied_edits", ())):
        if not isinstance(doc, dict) or "new_sha256" not in doc or not doc.get("path"):
            continue
        path = os.path.abspath(os.path.join(record.cwd or ".", str(doc["path"])))
        found.append(Edit(path, doc.get("old_sha256"), doc.get("new_sha256"), float(doc.get("at") or 0.0),
                          record.id, tuple(doc.get("changes") or ())))
    return found


def edit_chain(edits: list[Edit], path: str) -> list[Edit]:
    """The file's chain of edits, oldest first: from its newest edit back through each edit whose
    result the next one started from."""
    mine = sorted((e for e in edits if e.path == path), key=lambda e: e.at)
    if not mine:
        return []
    chain = [mine.pop()]
    while True:
        before = [e for e in mine if e.at <= chain[0].at and e.new_sha256 == chain[0].old_sha256]
        if not before:
            return chain
        link = before[-1]
        mine = mine[:mine.index(link)]
        chain.insert(0, link)
