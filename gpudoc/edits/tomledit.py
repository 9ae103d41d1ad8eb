"""TOML edits through tomlkit, which keeps comments, order and spelling of untouched values."""

from __future__ import annotations

import sys
from typing import Any, Sequence

from gpudoc.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib


def load(text: str, name: str = "TOML") -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{name}: not valid TOML: {exc}") from None


def set_value(text: str, path: Sequence[str], value: Any, *, name: str = "TOML") -> str:
    import tomlkit

    load(text, name)
    doc = tomlkit.parse(text)
    node: Any = doc
    for depth, key in enumerate(path[:-1]):
        if key not in node:
            node[key] = tomlkit.table()
        node = node[key]
        if not hasattr(node, "keys"):
            raise InputError(f"{name}: cannot set '{'.'.join(path)}': "
                             f"'{'.'.join(path[:depth + 1])}' is not a table")
    node[path[-1]] = value
    return doc.as_string()
