"""What a file preset works with: the parsed file, the knobs, and what it assigns and could not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from gpudoc.bind.args import PresetResult


@dataclass
class FileContext:
    name: str  # the file as the user wrote it, for messages
    knobs: Mapping[str, Any]
    world_size: int
    # The HF Trainer (or accelerate) fills DeepSpeed "auto" values from its own flags, so an
    # "auto" there is already bound and must stay "auto".
    hf_mode: bool = False
    # The knobs those flags carry at the profile's value: written by a binding, already on the command
    # line so, or read by the job itself ([bind] via_env). Any other an "auto" leaves to them does not arrive.
    carried: frozenset[str] = frozenset()


@dataclass
class FileResult(PresetResult):
    assignments: list[tuple[tuple[str, ...], Any, str]] = field(default_factory=list)  # (path, value, knob)
    # Keys whose framework reads either type, so the preset may change it (NeMo's precision: 16 or
    # "bf16"); every other value is type-checked against the one it replaces (FilePreset.write).
    retyped: set[tuple[str, ...]] = field(default_factory=set)

    def set(self, path: tuple[str, ...], value: Any, knob: str, *, any_type: bool = False) -> None:
        self.assignments.append((path, value, knob))
        self.expressed.add(knob)
        if any_type:
            self.retyped.add(path)
