"""File presets: where each knob lives in the config files frameworks read (each framework's
``file_preset``, ``gpudoc.frameworks``; the registry finds one by name).

Each preset has ``write`` (knobs -> key-path assignments, plus what it could not express),
``read`` (file -> the knob values it hard-codes, for the consistency check when a knob is set in
the profile but not bound into this file) and ``has_layout`` (whether a file's parsed data is laid
out as the framework's own config, for files bound by explicit key paths; the registry asks each
framework in its order, ``gpudoc.frameworks.registry.file_layout``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.targets import fit
from gpudoc.configvalues import get


@dataclass(frozen=True)
class FilePreset:
    name: str
    assign: Callable[[Any, FileContext], FileResult]  # knobs -> key paths, unchecked
    read: Callable[[Any], dict[str, Any]]
    # (the file's parsed top level, its suffix) -> whether it is this framework's config; None: no
    # layout of its own to recognise (it is only ever named)
    has_layout: Callable[[Mapping[str, Any], str], bool] | None = None
    # Whether a ``key=value`` override on the command line beats the file (the job composes its
    # overrides over it); False: the framework reads the file itself, after the command's flags.
    command_overrides: bool = True
    # (the file's data as it will be written, its label, the knobs, the world size) -> the refusal the
    # framework would raise at start-up on it, said before anything is written; None: no such check.
    startup_check: Callable[[Any, str, Mapping[str, Any], int], str | None] | None = None

    def write(self, data: Any, ctx: FileContext) -> FileResult:
        """The preset's assignments, each type-checked against the value it replaces by the check
        explicit bindings get (``targets.fit``): a preset never silently writes ``4`` over ``"8"``.
        DeepSpeed's ``"auto"``, ``null`` and OmegaConf placeholders take anything, as there."""
        res = self.assign(data, ctx)
        res.assignments = [
            (path, value if path in res.retyped else fit(get(data, path), value, file=ctx.name, key=".".join(path),
                                                          knob=knob), knob)
            for path, value, knob in res.assignments]
        return res

