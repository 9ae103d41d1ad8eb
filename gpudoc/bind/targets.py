"""Explicit bindings: what ``[bind.files."F"] KNOB = ...`` says, and whether a value may go there.

A knob names one key (``"vram.batch_size"``), several (``["model.max_seq_len", "vram.max_seq_len"]``),
or a key with a value map (``{key = "vram.use_fp16", map = {fp16 = true, bf16 = false}}``); a list
may hold maps too. Keys are dotted paths; ``NAME["key"]`` (or ``['key']``, ``[0]``) reaches keys that
hold dots, and dict keys in Python configs. ``fit`` is the type check: a value replaces one of the
same kind, so a binding can never write ``"fp16"`` over a boolean (SPEC "Bindings").
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from gpudoc.configvalues import MISSING, format_value, is_auto
from gpudoc.errors import ProfileError

_SEGMENT = re.compile(r"""\[\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|(\d+))\s*\]|([^.\[\]"']+)""")


def parse_key(text: str) -> tuple[str, ...]:
    """``a.b``, ``A["b.c"]``, ``a[0].b`` -> the path's parts; ValueError naming what is wrong."""
    parts: list[str] = []
    pos = 0
    while pos < len(text):
        if parts and text[pos] == "." and not text.startswith("[", pos + 1):
            pos += 1
        m = _SEGMENT.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read the key path {text!r} at character {pos + 1}")
        quoted, single, index, bare = m.groups()
        part = bare if bare is not None else index if index is not None else single if single is not None \
            else re.sub(r"\\(.)", r"\1", quoted)
        if bare is not None and bare != bare.strip():
            raise ValueError(f"the key path {text!r} has spaces around '{bare.strip()}'")
        parts.append(part)
        pos = m.end()
    if not parts or text.endswith("."):
        raise ValueError(f"cannot read the key path {text!r}")
    return tuple(parts)


@dataclass(frozen=True)
class Target:
    """One key a knob is written to: ``text`` as the profile spells it, ``path`` its parts."""

    text: str
    path: tuple[str, ...]
    map: Mapping[str, Any] | None = field(default=None, compare=False)

    def value_for(self, knob: str, value: Any, where: str) -> Any:
        """The knob's value as this key wants it: through the map when there is one."""
        if self.map is None:
            return value
        spelled = format_value(value)
        if spelled not in self.map:
            raise ProfileError(f"{where}: {knob} = {_show(value)} has no entry in the map for {self.text} "
                               f"(it maps {', '.join(self.map)}); add one")
        return self.map[spelled]


def targets(where: str, knob: str, spec: Any) -> list[Target]:
    """The keys one binding names; ProfileError (one line, naming the binding) when it is malformed."""
    items = spec if isinstance(spec, list) else [spec]
    if not items:
        raise ProfileError(f"{where} {knob}: an empty list binds nothing; name a key path")
    out = []
    for item in items:
        text: Any
        mapping: Any = None
        if isinstance(item, str):
            text = item
        elif isinstance(item, Mapping):
            unknown = sorted(set(item) - {"key", "map"})
            if unknown:
                raise ProfileError(f"{where} {knob}: unknown field '{unknown[0]}' (a binding table has key and map)")
            text, mapping = item.get("key"), item.get("map")
            if not isinstance(text, str):
                raise ProfileError(f"{where} {knob}: a binding table needs key = \"dotted.key\"")
            if mapping is not None and (not isinstance(mapping, Mapping) or not mapping):
                raise ProfileError(f"{where} {knob}: map must be a table of VALUE = REPLACEMENT, "
                                   f"e.g. map = {{fp16 = true, bf16 = false}}")
            for value, replacement in (mapping or {}).items():
                if isinstance(replacement, (Mapping, list)):
                    raise ProfileError(f"{where} {knob}: map.{value}: a replacement is a number, boolean or string")
        else:
            raise ProfileError(f"{where} {knob}: expected a key path string, a list of them, or "
                               f"{{key = \"dotted.key\", map = {{...}}}}, got {item!r}")
        try:
            path = parse_key(text)
        except ValueError as exc:
            raise ProfileError(f"{where} {knob}: {exc}") from None
        out.append(Target(text, path, mapping))
    return out


def _check_file_preset(label: str, path_text: str, preset: Any) -> None:
    """A file's preset is one the binder has: a config format's, or for a shell script an argument
    preset (its command line is edited as gpudoc's COMMAND would be)."""
    if preset is None:
        return
    # Here, not at the top: the presets' modules load only for a profile with [bind.files].
    from gpudoc.frameworks.registry import arg_preset_names, file_preset_names

    known = arg_preset_names() if path_text.endswith((".sh", ".bash")) else file_preset_names()
    if not isinstance(preset, str) or preset not in known:
        close = difflib.get_close_matches(str(preset), list(known), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ProfileError(f"{label}: unknown preset '{preset}'{hint}; one of {', '.join(sorted(known))}")


def check_files_table(files: Any, knobs: Mapping[str, Any], enums: Mapping[str, tuple[str, ...]],
                      where: str, line_of: Callable[[str, str], int | None] | None = None) -> None:
    """The shape of ``[bind.files]`` as the profile loads (no file is read here): every binding
    names a declared knob, readable key paths, and map values the knob can take.

    Errors name the profile and the binding's key (for ``--json``'s error envelope) and, when
    ``line_of(table, key)`` finds it in the profile's text, the line: ``FILE:LINE: [bind.files."F"] ...``."""
    if not isinstance(files, Mapping):
        raise ProfileError(f"{where}: [bind.files] must be a table of \"FILE\" = preset or table",
                           file=where, key="bind.files")
    for path_text, spec in files.items():
        table = f'bind.files."{path_text}"'
        key = table
        try:
            label = f"{_at(where, line_of, 'bind.files', path_text)}: [{table}]"
            if not isinstance(spec, (str, Mapping)):
                raise ProfileError(f"{label}: expected a preset name or a table of knob = \"key.path\"")
            if not isinstance(spec, str) and "preset" in spec:
                label = f"{_at(where, line_of, table, 'preset')}: [{table}]"
            _check_file_preset(label, path_text, spec if isinstance(spec, str) else spec.get("preset"))
            if isinstance(spec, str):
                continue
            for knob, binding in spec.items():
                if knob == "preset":
                    continue
                key = f"{table}.{knob}"
                label = f"{_at(where, line_of, table, knob)}: [{table}]"
                _check_binding(label, path_text, knob, binding, knobs, enums)
        except ProfileError as exc:
            exc.file, exc.key = exc.file or where, exc.key or key
            raise


def _at(where: str, line_of: Callable[[str, str], int | None] | None, table: str, key: str) -> str:
    """``FILE:LINE`` of ``key`` in ``[table]``, or ``FILE`` when its line is not found."""
    line = line_of(table, key) if line_of is not None else None
    return f"{where}:{line}" if line else where


def _check_binding(label: str, path_text: str, knob: str, binding: Any, knobs: Mapping[str, Any],
                   enums: Mapping[str, tuple[str, ...]]) -> None:
    """One ``KNOB = ...`` of ``[bind.files."F"]``: a declared knob, readable key paths, map values
    the knob can take; for a shell script, one flag."""
    if knob not in knobs:
        close = difflib.get_close_matches(knob, list(knobs), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ProfileError(f"{label} {knob}: not a knob in [train]{hint}")
    if path_text.endswith((".sh", ".bash")):
        if not isinstance(binding, str):
            raise ProfileError(f"{label} {knob}: a shell script binds a knob to one flag, e.g. \"--batch_size\"")
        return
    for target in targets(label, knob, binding):
        choices = enums.get(knob, ())
        for value in target.map or ():
            if choices and value not in choices:
                close = difflib.get_close_matches(value, choices, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ProfileError(f"{label} {knob}: map.{value}: {knob} is never '{value}'{hint}; "
                                   f"it is one of {', '.join(choices)}")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def _show(value: Any) -> str:
    """A value as the profile (TOML) spells it."""
    return json.dumps(value) if isinstance(value, str) else format_value(value)


def fit(old: Any, new: Any, *, file: str, key: str, knob: str) -> Any:
    """``new`` as it may replace ``old`` at ``file:key``, or a ProfileError naming file, key, old
    value and knob. Numbers replace numbers (an integral float written as an integer where one
    was), strings strings, booleans booleans; a missing key, ``null``, DeepSpeed's ``"auto"`` and
    OmegaConf's placeholders (``${...}``, ``???``: the value comes from elsewhere)
    take anything."""
    if old is MISSING or old is None or is_auto(old) or _placeholder(old):
        return new
    old_kind, new_kind = _kind(old), _kind(new)
    if old_kind in ("integer", "number") and new_kind in ("integer", "number"):
        if old_kind == "integer" and isinstance(new, float):
            if new.is_integer():
                return int(new)
            new_kind = "fraction"
        else:
            return new
    elif old_kind == new_kind and old_kind in ("boolean", "string"):
        return new
    held = f"the {old_kind} {_show(old)}" if old_kind not in ("table", "list") else f"a {old_kind}"
    hint = ""
    if old_kind == "boolean" or (new_kind == "string" and old_kind != "string"):
        hint = (f"; say how with a value map: {knob} = {{key = \"{key}\", map = {{{format_value(new)} = "
                f"{_show(old)}, ...}}}}")
    elif old_kind in ("table", "list"):
        hint = "; bind a key inside it"
    raise ProfileError(f"{file}: {key} holds {held}; {knob} = {_show(new)} is {_a(new_kind)}, not "
                       f"{_a(old_kind)}{hint}", file=file, key=key)


def _placeholder(value: Any) -> bool:
    return isinstance(value, str) and (value.strip() == "???" or value.strip().startswith("${"))


def _a(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind
