"""`gpudoc restore [RUN_ID]`: the profile and every bound file back to where gpudoc found them.

The files are those gpudoc edited in the run's chain (the run, its ``parent`` runs up to the first,
and every relaunch below them): each goes back to its bytes before the first edit of its chain of
edits (``gpudoc.runs.edits``). A file changed by hand since gpudoc's last edit is refused unless
``--force``, which keeps that change first (``_keep_hand_edits``); a file the user made read-only
since is refused even with ``--force`` (its mode is their word, which a forced restore would
silently undo); all files are checked before any is written, and a failed write puts back the
ones already written. A file gpudoc created is removed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudoc.atomic import atomic_write_bytes, refuse_read_only
from gpudoc.errors import ExitStatus, InputError
from gpudoc.render.show import show
from gpudoc.results.restore import RestoreResult
from gpudoc.runs.edits import Edit, edit_chain, fingerprint, original, read_bytes, record_edits, unlisted_folder
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from gpudoc.workspace import Workspace


@dataclass
class _Step:
    path: Path
    edits: list[Edit]
    current: bytes | None
    target: bytes | None  # None: the file did not exist before gpudoc's first edit
    action: str  # "restore" | "remove" | "unchanged"
    hand_edited: bool


def restore(ws: Workspace, run_id: str | None = None, *, dry_run: bool = False, force: bool = False,
            as_json: bool = False) -> int:
    """Put back every file the run's chain edited; 0 when done (or nothing to do)."""
    store = ws.store
    record = store.named_or_latest(run_id)
    if run_id is None and record.trial_of and not record.applied_edits:
        # A trial edits copies of its own; only `tune --apply` writes the user's files through one.
        raise InputError(f"the latest run {record.id} is a trial of `gpudoc tune` {record.trial_of}, which edited only "
                         "copies of its own: `gpudoc restore RUN_ID` names the run whose edits to undo")
    chain = chain_of(store, record)
    every = [edit for rec in store.records() for edit in record_edits(rec)]
    paths = sorted({edit.path for rec in chain for edit in record_edits(rec)} | _files_launched_as_edited(chain, every))
    steps = [_plan(store, Path(path), edit_chain(every, path)) for path in paths]
    hand = [s for s in steps if s.hand_edited]
    if hand and not force:
        first = hand[0]
        raise InputError(f"{first.path}: changed since gpudoc's last edit (run {first.edits[-1].run_id}); "
                         f"nothing was restored (--force restores it anyway, keeping that change in "
                         f"{unlisted_folder(store.home)})",
                         file=str(first.path))
    for step in steps:
        if step.action != "unchanged" and step.path.is_symlink() and step.hand_edited:
            # A link whose target gpudoc did not write is not the file it edited: never follow it.
            raise InputError(f"{step.path}: a symbolic link to a file gpudoc did not write; nothing was restored",
                             file=str(step.path))
        if step.action != "unchanged":
            # Not even with --force: chmod u+w is the user's own way to say gpudoc may write it again.
            refuse_read_only(step.path, outcome="nothing was restored (--force does not override a file's mode)")
    removed_backups: list[str] = []
    kept: dict[Path, str] = {}
    if not dry_run:
        kept = _keep_hand_edits(store, steps)
        _write(steps)
        removed_backups = _drop_backups(steps)
    result = RestoreResult(
        run_id=record.id, chain=tuple(r.id for r in chain), dry_run=dry_run,
        files=tuple({"path": str(s.path), "action": s.action, "hand_edited": s.hand_edited,
                     "from_sha256": fingerprint(s.current), "to_sha256": fingerprint(s.target),
                     "edits": [e.to_dict() for e in s.edits], "kept": kept.get(s.path)} for s in steps),
        removed_backups=tuple(removed_backups), exit_code=ExitStatus.OK)
    return show(result, ws.console, as_json=as_json)


def _files_launched_as_edited(chain: list[RunRecord], every: list[Edit]) -> set[str]:
    """The files the chain ran with that still hold gpudoc's newest edit of them: its profile, and
    the config files a job without one had its knobs read from. `fix --apply` edits them after a
    failed run; the user's own `gpudoc run` then starts a new chain, but what it launched with is
    gpudoc's edit, so restoring that chain puts them back too. A file changed by hand since is the
    user's, and left out."""
    found = set()
    for record in chain:
        named = [record.profile_path] + [where.removeprefix("file:").rsplit(":", 1)[0]
                                         for where in record.knob_places.values() if where.startswith("file:")]
        for name in filter(None, named):
            path = os.path.abspath(os.path.join(record.cwd or ".", name))
            edits = edit_chain(every, path)
            if edits and fingerprint(read_bytes(Path(path))) == edits[-1].new_sha256:
                found.add(path)
    return found


def chain_of(store: RunStore, record: RunRecord) -> list[RunRecord]:
    """The run's chain, oldest first: its parents up to the first run, every run below that one,
    and every relaunch by hand of the chain (``_relaunched``) with the runs below it."""
    root = record
    seen = {record.id}
    while root.parent and root.parent not in seen:
        parent = store.record_or_none(root.parent)
        if parent is None:
            break  # pruned: the chain starts at the oldest run still kept
        seen.add(parent.id)
        root = parent
    records = list(store.records())
    children: dict[str, list[RunRecord]] = {}
    for rec in records:
        if rec.parent:
            children.setdefault(rec.parent, []).append(rec)
    chain: list[RunRecord] = []
    todo, done = [root], set()
    while todo:
        rec = todo.pop()
        if rec.id in done:
            continue
        done.add(rec.id)
        chain.append(rec)
        todo.extend(children.get(rec.id, ()))
        if not todo:  # the chain so far is complete: a relaunch by hand of it is its too
            todo.extend(r for r in _relaunched(chain, records) if r.id not in done)
    return sorted(chain, key=lambda r: (r.started_at or "", r.id))


def _relaunched(chain: list[RunRecord], records: list[RunRecord]) -> list[RunRecord]:
    """The runs the user started by hand on a profile the chain's `fix --apply` (or `--retry-oom`)
    had edited, while it still held that edit: started after the edit, with that profile, and with
    every value the edit wrote. Their own edits (the knobs they wrote into bound files) follow from
    gpudoc's edit, and are undone with it."""
    from gpudoc.runs.record import parse_iso

    applied = [(doc, rec) for rec in chain for doc in rec.applied_edits if isinstance(doc, dict) and doc.get("path")]
    found = []
    for other in records:
        started = parse_iso(other.started_at)
        if other.profile_path is None or started is None:
            continue
        for doc, rec in applied:
            path = os.path.abspath(os.path.join(rec.cwd or ".", str(doc["path"])))
            if (os.path.abspath(os.path.join(other.cwd or ".", other.profile_path)) == path
                    # started_at is kept to the second: a relaunch within the second of the edit counts
                    and started + 1.0 > float(doc.get("at") or 0.0) and _launched_with(other, doc.get("changes") or ())):
                found.append(other)
                break
    return found


def _launched_with(record: RunRecord, changes: Sequence[Any]) -> bool:
    """Whether the run's profile held every value ``changes`` wrote ("train.X" is a knob)."""
    profile = record.profile or {}
    if not changes:
        return False
    for change in changes:
        if not isinstance(change, dict) or not isinstance(change.get("key"), str):
            return False
        section, _, key = str(change["key"]).partition(".")
        held = profile.get("knobs" if section == "train" else section)
        if not isinstance(held, dict) or held.get(key) != change.get("new"):
            return False
    return True


def _plan(store: RunStore, path: Path, edits: list[Edit]) -> _Step:
    current = read_bytes(path)
    first, last = edits[0], edits[-1]
    now = fingerprint(current)
    if now == first.old_sha256:
        return _Step(path, edits, current, current, "unchanged", False)
    target = None
    if first.old_sha256 is not None:
        target = original(store.home, first.old_sha256, path)
        if target is None:
            raise InputError(f"{path}: its state before gpudoc's first edit (run {first.run_id}) is no longer kept "
                             f"(neither in {store.home / 'originals'} nor in {path.name}.gpudoc.bak); "
                             "nothing was restored", file=str(path))
    return _Step(path, edits, current, target, "restore" if target is not None else "remove",
                 hand_edited=now != last.new_sha256)


def _keep_hand_edits(store: RunStore, steps: list[_Step]) -> dict[Path, str]:
    """``--force`` overwrites a change by hand: its bytes are kept first, where no run lists them
    (pruned by [runs] keep), so no restore overwrites bytes nothing holds; where they cannot be
    kept, nothing is restored."""
    from gpudoc.errors import GpudocError
    from gpudoc.runs.edits import keep_original

    kept = {}
    for step in steps:
        if step.hand_edited and step.action != "unchanged" and step.current is not None:
            try:
                kept[step.path] = str(unlisted_folder(store.home) / keep_original(store, step.current, listed=False))
            except (GpudocError, OSError) as exc:
                why = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise InputError(f"{step.path}: its change by hand cannot be kept ({why}); nothing was restored",
                                 file=str(step.path)) from None
    return kept


def _write(steps: list[_Step]) -> None:
    """All or nothing: a failed write puts back the files already written."""
    done: list[_Step] = []
    try:
        for step in steps:
            if step.action == "restore" and step.target is not None:
                # The file gpudoc edited: a link to it (a config in a shared folder) keeps being one.
                atomic_write_bytes(step.path, step.target, follow_link=True)
            elif step.action == "remove":
                step.path.unlink(missing_ok=True)
            else:
                continue
            done.append(step)
    except OSError as exc:
        for step in reversed(done):
            try:
                if step.current is not None:
                    atomic_write_bytes(step.path, step.current, follow_link=True)
            except OSError:
                pass
        raise InputError(f"{exc.filename or 'a file'}: cannot write: {exc.strerror or exc}; nothing was restored",
                         file=str(exc.filename) if exc.filename else None) from None


def _drop_backups(steps: list[_Step]) -> list[str]:
    """A ``.gpudoc.bak`` that holds what the file now holds again is spent: it goes, so the next
    chain's first edit keeps its own starting point there."""
    removed = []
    for step in steps:
        backup = step.path.with_name(step.path.name + ".gpudoc.bak")
        if step.action == "unchanged" or backup.is_symlink() or not backup.is_file():
            continue
        if step.target is not None and fingerprint(read_bytes(backup)) == fingerprint(step.target):
            try:
                os.unlink(backup)
            except OSError:
                continue
            removed.append(str(backup))
    return removed
