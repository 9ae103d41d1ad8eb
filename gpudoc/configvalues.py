"""Values as config files, command lines and the environment spell them, read and written the same
way wherever a knob is read (``gpudoc.job``, ``gpudoc.frameworks``) or written (``gpudoc.bind``).

Reading: a key path into a parsed file (``get``, ``MISSING`` when absent), a count as a file says
it (``count``: ``8.0`` and ``"8"`` are 8), a value that says none (``placeholder``: ``"auto"``,
``${...}``, ``???``), a boolean's spellings (``as_bool_text``). Writing: ``format_value``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MISSING = object()


def get(data: Any, path: tuple[str, ...]) -> Any:
    node = data
    for key in path:
        if isinstance(node, Mapping) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return MISSING
    return node


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def num(value: Any) -> int | None:
    if isinstance(value, bool) or value is MISSING:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def placeholder(value: Any) -> bool:
    """A value that says none: DeepSpeed's "auto" (the Trainer fills it), OmegaConf's ``${...}`` and ``???``."""
    return is_auto(value) or (isinstance(value, str) and (value.strip() == "???" or value.strip().startswith("${")))


def count(value: Any) -> Any:
    """A count as a file says it: the number (``8.0`` is 8, a quoted ``"8"`` too: the frameworks'
    config parsers coerce it); None when absent, null or a placeholder; anything else as written,
    for the job's reader to name (``"eight"``, ``8.5``, ``true``)."""
    if value is MISSING or value is None or placeholder(value):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    number = num(value)
    return number if number is not None else value


def format_value(value: Any) -> str:
    """The string form used for env variables and ``{knob}`` placeholders."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return repr(value)
    return str(value)


def as_bool_text(text: str) -> bool | None:
    """``True``/``false``/``1``/``no``... as a bool; None when it is not a boolean spelling."""
    low = text.strip().lower()
    if low in ("true", "1", "yes", "y", "on"):
        return True
    if low in ("false", "0", "no", "n", "off"):
        return False
    return None
