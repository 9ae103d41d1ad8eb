"""Writing a bind plan: every file edit atomic, a backup first, all or nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpudoc.atomic import atomic_write_text, backup, refuse_read_only
from gpudoc.bind.plan import BindPlan, FileEdit
from gpudoc.edits.lineends import read_exact
from gpudoc.errors import InputError
from gpudoc.runs.edits import entry, read_bytes


def _edit_config(path: Path, text: str) -> None:
    # The user named this file: a config that is a symlink is edited at its target, the link kept.
    atomic_write_text(path, text, follow_link=True)


def apply_file_edits(plan: BindPlan, *, writer: Callable[[Path, str], None] = _edit_config,
                     keep: Callable[[bytes], object] | None = None) -> list[dict]:
    """Write every planned edit (backup first, atomic replace); all or nothing.

    A file that changed since planning is refused. When a later write fails, the files already
    written are put back, so the job never starts against a half-applied set of edits. Each
    edit's record carries the fingerprints of the file's bytes before and after
    (``gpudoc.runs.edits``); ``keep`` is handed the bytes before, for `gpudoc restore`.
    """
    for edit in plan.file_edits:
        try:
            current = read_exact(Path(edit.path))
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{edit.path}: cannot read before editing: {exc}") from None
        if current != edit.old_text:
            raise InputError(f"{edit.path}: changed since gpudoc planned the edit; nothing was written")
        refuse_read_only(Path(edit.path))
    befores = {}
    for edit in plan.file_edits:  # kept before anything is written: a failure here writes nothing
        try:
            befores[edit.path] = Path(edit.path).read_bytes()
        except OSError as exc:
            raise InputError(f"{edit.path}: cannot read before editing: {exc}") from None
        if keep is not None:
            keep(befores[edit.path])
    done: list[tuple[FileEdit, Path]] = []
    records = []
    try:
        for edit in plan.file_edits:
            before = befores[edit.path]
            # The bytes before are kept by ``keep``: a first backup of an earlier chain stays as it is.
            saved = backup(Path(edit.path), held=lambda _data: keep is not None)
            writer(Path(edit.path), edit.new_text)
            done.append((edit, saved))
            records.append(entry(Path(edit.path), before, read_bytes(Path(edit.path)), backup=str(saved),
                                 changes=list(edit.changes), diff=edit.diff))
    except OSError as exc:
        for edit, _ in reversed(done):
            try:
                _edit_config(Path(edit.path), edit.old_text)
            except OSError:
                pass
        raise InputError(f"cannot write {exc.filename or 'a config file'}: {exc.strerror or exc}; "
                         f"no config file was changed") from None
    return records
