"""Validate a parsed profile against the schema, and name what is wrong: file, line and key, with
a did-you-mean (tomllib keeps no positions, so lines are found in the text)."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Mapping

from gpudoc.errors import ProfileError
from gpudoc.profiles import schema


def error_at(path: Path, text: str, table: str | None, key: str, message: str, *, shown: str | None = None,
              nth: int = 0) -> ProfileError:
    """The one-line error for ``key`` in ``[table]`` of ``path``: ``FILE:LINE: KEY: message``.
    ``shown`` replaces the dotted key in the message; ``nth`` picks one of several ``[[table]]``."""
    line = line_of(text, table, key, nth=nth)
    where = f"{path}:{line}" if line else str(path)
    dotted = f"{table}.{key}" if table else key
    return ProfileError(f"{where}: {shown or dotted}: {message}", file=str(path), key=dotted)


def read_quietly(path: Path) -> str:
    """The text of a profile already parsed once, to place an error found after parsing."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def validate(data: Mapping[str, Any], path: Path, text: str) -> None:
    def fail(table: str | None, key: str, message: str, shown: str | None = None) -> None:
        raise error_at(path, text, table, key, message, shown=shown)

    allowed_top = {**schema.TOP_LEVEL, **dict.fromkeys(schema.TABLES, (dict,)), "env": (dict,)}
    for key, value in data.items():
        if key not in allowed_top:
            fail(None, key, f"unknown key{did_you_mean(key, list(allowed_top))}")
        if not isinstance(value, allowed_top[key]):
            fail(None, key, f"expected {_type_names(allowed_top[key])}, got {type(value).__name__}")
    for table, value in data.items():
        if not isinstance(value, dict):
            continue
        if table == "env":
            for var, v in value.items():
                if not isinstance(v, (str, int, float, bool)):
                    fail("env", var, f"expected a string, got {type(v).__name__}")
                _check_env_entry(var, v, fail)
            continue
        keys = schema.TABLES[table]
        for key, v in value.items():
            if key not in keys:
                if table in schema.OPEN_TABLES:
                    if not isinstance(v, (int, float, bool, str)):
                        fail(table, key, f"custom knobs must be numbers, booleans or strings, got {type(v).__name__}")
                    _check_number(table, key, v, fail)
                    continue
                fail(table, key, f"unknown key{did_you_mean(key, list(keys))}")
            expected = keys[key]
            # bool is an int in Python; an int knob given `true` is a mistake worth naming.
            if isinstance(v, bool) and bool not in expected:
                fail(table, key, f"expected {_type_names(expected)}, got a boolean")
            if not isinstance(v, expected):
                fail(table, key, f"expected {_type_names(expected)}, got {type(v).__name__} {v!r}")
            _check_number(table, key, v, fail)
            choices = schema.ENUMS.get((table, key))
            if choices and v not in choices:
                fail(table, key, f"'{v}' is not one of {', '.join(choices)}{did_you_mean(str(v), choices)}")
        if table == "train":
            gc = value.get("gradient_checkpointing")
            if isinstance(gc, str) and gc != "selective":
                fail("train", "gradient_checkpointing", f"expected true, false or \"selective\", got {gc!r}")
            stage = value.get("zero_stage")
            if isinstance(stage, int) and not 0 <= stage <= 3:
                fail("train", "zero_stage", f"expected 0..3, got {stage}")
        if table == "bind":
            _check_arg_preset(value.get("args"), fail)
            via_env = value.get("via_env", [])
            if not all(isinstance(k, str) for k in via_env):
                fail("bind", "via_env", "expected an array of knob names")
            if via_env and value.get("env") is False:
                fail("bind", "via_env", "needs env = true: the job reads these knobs from GPUDOC_<KNOB>")
        if table == "ladder":
            tu = value.get("target_utilization")
            if tu is not None and not 0 < tu <= 1:
                fail("ladder", "target_utilization", f"expected a fraction in (0, 1], got {tu}")
            for rung in value.get("rung", []):
                _validate_rung(rung, fail)


def _check_env_entry(name: str, value: Any, fail: Callable[..., None]) -> None:
    """What execve can carry: ``NAME=VALUE`` C strings, so no NUL anywhere and no '=' in the name
    (the job would read a different variable), and a name at all. Caught here, a bad entry is the
    profile's error before anything runs, not a crash at launch that leaves a dead run record."""
    import json  # only on a mistake: shows a NUL as \u0000 in the one-line error

    shown = f"env.{json.dumps(name)}" if not name.isprintable() or not name or "=" in name else None
    if not name:
        fail("env", name, "a variable needs a name", shown)
    if "\0" in name:
        fail("env", name, "a variable name cannot hold a NUL character", shown)
    if "=" in name:
        fail("env", name, "a variable name cannot hold '=' (the environment splits NAME=VALUE at the first '=')",
             shown)
    if isinstance(value, str) and "\0" in value:
        fail("env", name, "the value holds a NUL character, which no environment variable can carry", shown)


def _check_arg_preset(preset: Any, fail: Callable[..., None]) -> None:
    """``[bind] args`` names a preset the binder has (its table is the one list of them)."""
    if not isinstance(preset, str):
        return  # absent; a wrong type was reported with the other types
    from gpudoc.frameworks.registry import arg_preset_names  # only with a [bind] table: `check` stays light

    known = arg_preset_names()
    if preset not in known:
        fail("bind", "args", f"unknown preset '{preset}'{did_you_mean(preset, known)}; "
                             f"one of {', '.join(known)}")


def _check_number(table: str, key: str, value: Any, fail: Callable[[str | None, str, str], None]) -> None:
    """Numbers are finite, and within their key's bounds where it has some (schema.RANGES)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        fail(table, key, f"expected a finite number, got {value}")
    bounds = schema.RANGES.get((table, key))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        fail(table, key, f"expected {_number(bounds[0])} to {_number(bounds[1])}, got {_number(value)}")


def _number(value: float) -> str:
    """1,000,000 rather than 1e+06; a 300-digit typo as 1.23e+299, not 300 digits."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.6g}"


def _validate_rung(rung: Any, fail: Callable[[str | None, str, str], None]) -> None:
    if not isinstance(rung, dict):
        fail("ladder", "rung", "each [[ladder.rung]] must be a table")
    for key, v in rung.items():
        if key not in schema.USER_RUNG_KEYS:
            fail("ladder.rung", key, f"unknown key{did_you_mean(key, list(schema.USER_RUNG_KEYS))}")
        if not isinstance(v, schema.USER_RUNG_KEYS[key]):
            fail("ladder.rung", key, f"expected {_type_names(schema.USER_RUNG_KEYS[key])}")
        _check_number("ladder.rung", key, v, fail)
    for required in ("name", "knob", "op"):
        if required not in rung:
            fail("ladder.rung", required, "missing (every user rung needs name, knob and op)")
    if rung["op"] not in schema.USER_RUNG_OPS:
        fail("ladder.rung", "op", f"'{rung['op']}' is not one of {', '.join(schema.USER_RUNG_OPS)}")
    if rung["op"] == "set" and "value" not in rung:
        fail("ladder.rung", "value", "op = \"set\" needs a value")


def _type_names(types: tuple) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", dict: "a table", list: "an array"}
    if types == schema.NUMBER:
        return "a number"
    return " or ".join(names.get(t, t.__name__) for t in types)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib  # only on a mistake

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def line_of(text: str, table: str | None, key: str, nth: int = 0) -> int | None:
    """1-based line of ``key`` inside ``[table]`` (the ``nth`` ``[[table]]`` of several);
    tomllib keeps no positions, so look it up."""
    current = None
    seen = -1  # headers of ``table`` passed so far, less one
    key_re = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    dotted_re = re.compile(rf"^\s*{re.escape(table)}\.{re.escape(key)}\s*=") if table else None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1).strip()
            seen += current == table
            if table is None and current == key:
                return number
            continue
        if current == table and (table is None or seen == nth) and key_re.match(line):
            return number
        if current is None and dotted_re is not None and dotted_re.match(line):
            return number
    return _escaped_key_line(lines, table, key)


def _escaped_key_line(lines: list[str], table: str | None, key: str) -> int | None:
    """A key written with escapes (``"A\\u0000B" = 1``) does not read as itself: parse each line
    of ``[table]`` alone (only on an error, and only when the plain search found nothing)."""
    toml = toml_parser()
    current = None
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1).strip()
            continue
        if current == table and "=" in line:
            try:
                if key in toml.loads(line):
                    return number
            except toml.TOMLDecodeError:
                continue  # a value spread over several lines: not this key's line anyway
    return None


def toml_parser() -> Any:
    """``tomllib``, or ``tomli`` before Python 3.11."""
    if sys.version_info >= (3, 11):  # imported here: `gpudoc check` without a profile never parses TOML
        import tomllib
    else:  # pragma: no cover - exercised on 3.9/3.10 only
        import tomli as tomllib
    return tomllib
