"""One config file while a bind plan is made: its text, its parsed data, and every value set in it.

Each value goes in through the format's surgical editor and is read back: the file must parse as
before with only that value changed, or nothing is planned for it.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoc.configvalues import MISSING, get
from gpudoc.edits import jsonedit, pyedit, tomledit, yamledit
from gpudoc.edits.lineends import as_lf, read_exact, restore
from gpudoc.errors import InputError, ProfileError, UsageError

_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".py": "py",
            ".sh": "sh", ".bash": "sh"}


def file_format(path: Path) -> str:
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ProfileError(f"[bind.files] {path.name}: gpudoc edits .json, .yaml/.yml, .toml, .py and .sh files")
    return fmt


def _load(fmt: str, text: str, name: str) -> Any:
    if fmt == "json":
        return jsonedit.load(text, name)
    if fmt == "yaml":
        return yamledit.plain(yamledit.load(text, name))
    if fmt == "toml":
        return tomledit.load(text, name)
    if fmt == "py":
        return pyedit.load(text, name)
    raise AssertionError(fmt)


def _set(fmt: str, text: str, path: tuple[str, ...], value: Any, name: str) -> str:
    editor = {"json": jsonedit, "yaml": yamledit, "toml": tomledit, "py": pyedit}[fmt]
    return editor.set_value(text, path, value, name=name)


def _with(data: Any, path: tuple[str, ...], value: Any) -> Any:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value
    return out


def unified_diff(old: str, new: str, label: str) -> str:
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{label}", tofile=f"b/{label}"):
        lines.append(line)
        if not line.endswith("\n"):
            lines.append("\n\\ No newline at end of file\n")
    return "".join(lines)


def show_key(path: tuple[str, ...]) -> str:
    return ".".join(path)


@dataclass
class FileEdit:
    """One config file's planned change. ``changes`` lists ``{"key", "old", "new"}`` per value."""

    path: Path
    old_text: str
    new_text: str
    diff: str
    changes: list[dict] = field(default_factory=list)
    label: str = ""  # the file as the profile or the command names it

    def to_dict(self) -> dict:
        return {"path": str(self.path), "diff": self.diff, "changes": list(self.changes)}


class FileState:
    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label
        self.fmt = file_format(path)
        try:
            self.old_text = read_exact(path)
        except FileNotFoundError:
            raise UsageError(f"{label}: file not found (bound in the profile or named by the command)",
                             file=label) from None
        except IsADirectoryError:
            raise UsageError(f"{label}: a directory, not a config file (bound in the profile or named by "
                             f"the command)", file=label) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{label}: cannot read: {exc}", file=label) from None
        self.text, self.crlf = as_lf(self.old_text)  # the editors see LF; edit() puts CRLF back
        self.changes: list[dict] = []
        # Every value a binding or preset put here, changed or not (what `run --dry-run` shows).
        self.bindings: list[dict] = []
        self.data = _load(self.fmt, self.text, label) if self.fmt != "sh" else None

    def current(self, path: tuple[str, ...]) -> Any:
        return get(self.data, path)

    def assign(self, path: tuple[str, ...], value: Any, *, knob: str | None = None, key: str | None = None) -> None:
        old = get(self.data, path)
        shown = key or show_key(path)
        self.bindings.append({"knob": knob, "file": self.label, "key": shown,
                              "old": None if old is MISSING else old, "new": value, "added": old is MISSING})
        if old is not MISSING and type(old) is type(value) and old == value:
            return
        new_text = _set(self.fmt, self.text, path, value, self.label)
        new_data = _load(self.fmt, new_text, self.label)
        # The editors are surgical; this proves it: the file must read back as before with only
        # this one value changed.
        if new_data != _with(self.data, path, value):
            raise InputError(f"{self.label}: editing '{shown}' would change more than that value; "
                             f"edit it by hand or bind it differently")
        self.text, self.data = new_text, new_data
        self.changes.append({"key": shown, "old": None if old is MISSING else old, "new": value})

    def edit(self) -> FileEdit | None:
        new_text = restore(self.text, self.crlf)
        if new_text == self.old_text:
            return None
        return FileEdit(self.path, self.old_text, new_text, unified_diff(self.old_text, new_text, self.label),
                        self.changes, self.label)
