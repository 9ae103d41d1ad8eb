"""Write a ladder suggestion into the profile: tomlkit round trip, atomic, with a backup.

Comments, key order and layout outside the changed values are kept byte for byte. A shipped
profile is never edited in place: the change goes into a project ``./gpudoc.toml`` that
``extends`` it and holds only the changed keys. When a knob lives only in a parent profile, the
override is written into the child the user named.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gpudoc.atomic import atomic_write_text, backup, refuse_read_only
from gpudoc.edits.lineends import as_lf, read_exact, restore
from gpudoc.errors import ProfileError, UsageError
from gpudoc.profiles.loader import PROJECT_PROFILE
from gpudoc.profiles.model import Profile
from gpudoc.trust import Refused, untrusted

if TYPE_CHECKING:
    from gpudoc.ladder.model import Suggestion
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RunStore


def target_path(profile: Profile, cwd: Path | None = None) -> Path:
    """The file ``apply_changes`` would write for this profile."""
    cwd = Path(cwd or Path.cwd())
    if profile.path is None or profile.shipped:
        return cwd / PROJECT_PROFILE
    return Path(profile.path)


def apply_changes(profile: Profile, suggestion: Suggestion, *, cwd: Path | None = None,
                  held: Callable[[bytes], bool] | None = None) -> Path:
    """Write ``suggestion``'s knob and env changes; return the file written.

    Raises ``ProfileError`` when the project profile it would write already exists and extends a
    different profile (writing there would silently change which profile the job uses), and
    ``InputError`` for a read-only profile or one whose bytes now no backup would hold (``held``:
    whether the run store keeps them; ``gpudoc.atomic.backup``).
    """
    import tomlkit

    if not suggestion.changes_profile:
        raise UsageError(f"rung '{suggestion.rung}' changes no profile setting: nothing to write")
    cwd = Path(cwd or Path.cwd())
    path = target_path(profile, cwd)
    problem = untrusted(path)
    if problem is not None:  # a ./gpudoc.toml skipped as another user's is not theirs to be edited either
        raise Refused(f"{problem}: gpudoc will not edit it ({problem.remedy}); nothing was written", file=str(path))
    refuse_read_only(path)
    creating = not path.exists()
    crlf = False  # tomlkit writes LF: a CRLF profile gets CRLF back

    if profile.shipped:
        if creating:
            text = (
                f"# Written by `gpudoc fix --apply`: overrides of the shipped profile \"{profile.name}\",\n"
                "# which gpudoc never edits in place. Use it with `-p gpudoc.toml` (or no -p at all).\n"
                f"extends = \"{profile.name}\"\n"
            )
        else:
            text, crlf = as_lf(_read(path))
            extends = _toml_get(tomlkit.parse(text), "extends")
            if extends != profile.name:
                what = f"extends '{extends}'" if extends else "extends no profile"
                raise ProfileError(
                    f"{path} already exists and {what}, not the shipped profile '{profile.name}': "
                    f"refusing to overwrite it; run with -p {PROJECT_PROFILE}, or add "
                    f"extends = \"{profile.name}\" to it"
                )
    elif creating:
        if profile.path is not None:
            raise ProfileError(f"{path}: profile file vanished; nothing was written")
        text = "# Written by `gpudoc fix --apply`.\n"
    else:
        text, crlf = as_lf(_read(path))

    try:
        doc = tomlkit.parse(text)
    except Exception as exc:  # tomlkit raises its own ParseError subclasses
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    if suggestion.changes:
        _set_all(doc, "train", {knob: new for knob, (_old, new) in suggestion.changes.items()})
    if suggestion.env:
        _set_all(doc, "env", dict(suggestion.env))
    new_text = tomlkit.dumps(doc)
    if new_text == text and not creating:
        return path
    new_text = restore(new_text, crlf)
    fresh_backup = None
    if not creating:
        # backup() decides what to keep (the first real backup; a link planted where it goes is
        # replaced, never taken for one); whether it wrote a new file shows in the inode.
        before = _inode(path.with_name(path.name + ".gpudoc.bak"))
        saved = backup(path, held=held)
        fresh_backup = saved if _inode(saved) != before else None
    try:
        atomic_write_text(path, new_text, follow_link=True)  # the user's profile: a link is edited at its target
    except OSError:
        if fresh_backup is not None:
            fresh_backup.unlink(missing_ok=True)  # nothing written means nothing, a backup included
        raise
    return path


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def apply_recorded(profile: Profile, suggestion: Suggestion, *, cwd: Path, store: RunStore,
                   record: RunRecord | None) -> Path:
    """``apply_changes``, with the edit listed in the failed run's ``applied_edits`` and the bytes
    before it kept in the run store (`gpudoc restore` undoes it)."""
    from gpudoc.errors import GpudocError
    from gpudoc.runs.edits import fingerprint, keep_original, original, remembered_edit

    path = target_path(profile, cwd)

    def held(data: bytes) -> bool:
        """Are these bytes (a hand edit since the first backup) kept? By remembered_edit for a run's
        edit; for a log's (`fix --log`), kept now, only because the backup does not hold them."""
        if original(store.home, str(fingerprint(data)), path) is not None:
            return True
        if record is not None:
            return False
        try:
            keep_original(store, data, listed=False)
        except (GpudocError, OSError):
            return False
        return True

    changes = [{"key": f"train.{knob}", "old": old, "new": new} for knob, (old, new) in suggestion.changes.items()]
    changes += [{"key": f"env.{name}", "old": None, "new": value} for name, value in suggestion.env.items()]
    with remembered_edit(store, record, path, rung=suggestion.rung, changes=changes):
        return apply_changes(profile, suggestion, cwd=cwd, held=held)


def _read(path: Path) -> str:
    try:
        return read_exact(path)
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not a text file in UTF-8 (byte {exc.start}): a profile is TOML text") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc.strerror}") from None


def _toml_get(doc: Any, key: str) -> Any:
    value = doc.get(key)
    return value.unwrap() if hasattr(value, "unwrap") else value


def _set_all(doc: Any, table_name: str, values: dict) -> None:
    import tomlkit

    table = doc.get(table_name)
    if table is None:
        table = tomlkit.table()
        if len(doc.body) and not tomlkit.dumps(doc).endswith("\n\n"):
            doc.add(tomlkit.nl())
        doc.add(table_name, table)
        table = doc[table_name]
    for key, value in values.items():
        # Assigning over an existing key keeps its trailing comment and position.
        table[key] = value
