"""What a file preset works with: the parsed file, the knobs, and what it assigns and could not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from gpudoc.bind.args import PresetResult

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


@dataclass
class FileContext:
    name: str  # the file as the user wrote it, for messages
    knobs: Mapping[str, Any]
    world_size: int
    # The HF Trainer (or accelerate) fills DeepSpeed "auto" values from its own flags, so an
    # "auto" there is already bound and must stay "auto".
    hf_mode: bool = False


@dataclass
class FileResult(PresetResult):
    assignments: list[tuple[tuple[str, ...], Any, str]] = field(default_factory=list)  # (path, value, knob)
    follow: list[tuple[str, str, bool]] = field(default_factory=list)  # (file, preset, hf_mode)
    # Keys whose framework reads either type, so the preset may change it (NeMo's precision: 16 or
    # "bf16"); every other value is type-checked against the one it replaces (FilePreset.write).
    retyped: set[tuple[str, ...]] = field(default_factory=set)

    def set(self, path: tuple[str, ...], value: Any, knob: str, *, any_type: bool = False) -> None:
        self.assignments.append((path, value, knob))
        self.expressed.add(knob)
        if any_type:
            self.retyped.add(path)


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
