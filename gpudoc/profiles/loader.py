"""Find, parse, merge (``extends``) and validate profiles.

Lookup (SPEC): ``-p PATH`` names a file; ``-p NAME`` or ``GPUDOC_PROFILE`` is searched in
``./.gpudoc/profiles/``, ``$XDG_CONFIG_HOME/gpudoc/profiles/`` and the shipped ``profiles/``;
with no name, ``./gpudoc.toml`` is used when it exists, else the job runs without a profile.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Mapping

from gpudoc.errors import ProfileError
from gpudoc.profiles import schema
from gpudoc.profiles.model import EMPTY, Profile

PROJECT_PROFILE = "gpudoc.toml"


def shipped_profiles_dir() -> Path:
    """The bundled profiles: beside the package in a checkout, else under the ``share/`` of the
    prefix the package was installed into (a venv or system prefix, or the user base of a
    ``pip install --user``)."""
    import site

    candidates = [
        Path(__file__).resolve().parents[2] / "profiles",
        Path(sys.prefix) / "share" / "gpudoc" / "profiles",
        Path(site.getuserbase()) / "share" / "gpudoc" / "profiles",
    ]
    return next((c for c in candidates if c.is_dir()), candidates[1])


def search_dirs(cwd: Path | None = None) -> list[Path]:
    cwd = cwd or Path.cwd()
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [cwd / ".gpudoc" / "profiles", Path(xdg) / "gpudoc" / "profiles", shipped_profiles_dir()]


def _looks_like_path(name: str) -> bool:
    return name.endswith(".toml") or os.sep in name or name.startswith(".")


def resolve_profile_path(name: str | None, cwd: Path | None = None) -> Path | None:
    """The file a ``-p`` value (or ``GPUDOC_PROFILE``, or nothing) refers to; None = no profile."""
    cwd = cwd or Path.cwd()
    name = name or os.environ.get("GPUDOC_PROFILE") or None
    if name is None:
        project = cwd / PROJECT_PROFILE
        if project.is_file():
            return project
        if os.path.lexists(project):  # a directory, a dangling link, a fifo: not silently "no profile"
            raise ProfileError(f"{project}: not a profile file ({_file_kind(project)})", file=str(project))
        return None
    if _looks_like_path(name):
        path = (cwd / name) if not os.path.isabs(name) else Path(name)
        if not path.is_file():
            if os.path.lexists(path):
                raise ProfileError(f"{name}: not a profile file ({_file_kind(path)})", file=str(path))
            raise ProfileError(f"profile file not found: {name}", file=str(path))
        return path
    for directory in search_dirs(cwd):
        candidate = directory / f"{name}.toml"
        if candidate.is_file():
            return candidate
    known = sorted(list_profile_names(cwd))
    hint = _did_you_mean(name, known)
    raise ProfileError(f"unknown profile '{name}'{hint} (see `gpudoc profile list`)")


def _file_kind(path: Path) -> str:
    if path.is_dir():
        return "a directory"
    if path.is_symlink() and not path.exists():
        return "a link to nothing"
    return "not a regular file"


def list_profile_names(cwd: Path | None = None) -> dict[str, Path]:
    """Every profile name visible from here; earlier search directories shadow later ones."""
    found: dict[str, Path] = {}
    for directory in search_dirs(cwd):
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found.setdefault(path.stem, path)
    return found


def load_profile(name: str | None = None, cwd: Path | None = None) -> Profile:
    path = resolve_profile_path(name, cwd)
    if path is None:
        return EMPTY
    return load_profile_file(path, cwd=cwd)


def load_profile_file(path: Path, cwd: Path | None = None) -> Profile:
    chain: list[Path] = []
    rung_files: list[Path] = []
    merged = _load_chain(Path(path), chain, cwd, rung_files)
    _check_bindings(merged, chain[0])
    _check_rung_knobs(merged, rung_files)
    shipped_dir = shipped_profiles_dir().resolve()
    leaf = chain[0]
    return Profile(
        name=leaf.stem if leaf.name != PROJECT_PROFILE else "gpudoc.toml",
        path=leaf,
        chain=tuple(chain),
        shipped=leaf.resolve().parent == shipped_dir,
        description=merged.get("description", ""),
        gpu=merged.get("gpu", {}),
        env={k: str(v) for k, v in merged.get("env", {}).items()},
        train=merged.get("train", {}),
        launch=merged.get("launch", {}),
        model=merged.get("model", {}),
        estimate=merged.get("estimate", {}),
        bind=merged.get("bind", {}),
        ladder=merged.get("ladder", {}),
        run=merged.get("run", {}),
        runs=merged.get("runs", {}),
    )


def _check_bindings(merged: Mapping[str, Any], leaf: Path) -> None:
    """``[bind.files]`` against the merged ``[train]`` (a child may bind a knob its parent declares);
    the files themselves are read when the job's command is known (``run``, ``run --dry-run``)."""
    from gpudoc.bind.targets import check_files_table

    files = dict(merged.get("bind") or {}).get("files")
    if files:
        enums = {key: choices for (table, key), choices in schema.ENUMS.items() if table == "train"}
        check_files_table(files, dict(merged.get("train") or {}), enums, str(leaf))


def _check_rung_knobs(merged: Mapping[str, Any], rung_files: list[Path]) -> None:
    """A user rung's knob against the merged ``[train]`` (a child may declare the knob a parent's
    rung halves) and the standard knobs.

    A knob declared nowhere is allowed: the SPEC's own example rung halves an undeclared
    ``n_negatives``, and the ladder skips such a rung saying the knob is not declared. A name
    close to a declared or standard knob is a typo that would leave the rung silently inert, so it
    stops the load.
    """
    rungs = dict(merged.get("ladder") or {}).get("rung") or []
    known = [*dict(merged.get("train") or {}), *schema.TABLES["train"]]
    for index, (rung, path) in enumerate(zip(rungs, rung_files)):
        knob = rung["knob"]
        if knob in known:
            continue
        hint = _did_you_mean(knob, known)
        if hint:
            nth = sum(1 for p in rung_files[:index] if p == path)
            raise _error_at(path, _read_quietly(path), "ladder.rung", "knob",
                            f"rung '{rung['name']}': '{knob}' is not a knob in [train]{hint}", nth=nth)


MAX_EXTENDS_DEPTH = 32  # a real chain is two or three deep; this stops a runaway before the stack does


def _load_chain(path: Path, chain: list[Path], cwd: Path | None, rung_files: list[Path]) -> dict:
    """The merged tables of ``path`` and its parents; ``rung_files`` gets, in the merged order,
    the file each ``[[ladder.rung]]`` came from (errors found after the merge name it)."""
    resolved = path.resolve()
    if resolved in (p.resolve() for p in chain):
        cycle = " -> ".join(str(p) for p in [*chain, path])
        raise ProfileError(f"{chain[0]}: 'extends' forms a cycle: {cycle}", file=str(chain[0]), key="extends")
    chain.append(path)
    if len(chain) > MAX_EXTENDS_DEPTH:
        raise ProfileError(f"{chain[0]}: 'extends' goes more than {MAX_EXTENDS_DEPTH} profiles deep "
                           f"(at {path})", file=str(chain[0]), key="extends")
    data = parse_profile_text(path)
    own_rungs = [path] * len(dict(data.get("ladder") or {}).get("rung") or [])
    if "extends" not in data:
        rung_files.extend(own_rungs)
        return data
    # A parent is looked up like -p NAME, but a profile never extends itself by name: skip the
    # directory the child lives in when the names match (gpudoc.toml extends "a10g-24gb" is fine,
    # .gpudoc/profiles/a10g-24gb.toml extending "a10g-24gb" means the shipped one).
    parent_path = _resolve_parent(data["extends"], path, cwd)
    parent = _load_chain(parent_path, chain, cwd, rung_files)
    rung_files.extend(own_rungs)  # merge() puts a child's rungs after its parents'
    return merge(parent, data)


def _resolve_parent(name: str, child: Path, cwd: Path | None) -> Path:
    def fail(message: str) -> ProfileError:
        return _error_at(child, _read_quietly(child), None, "extends", message, shown=f"extends = '{name}'")

    if not name.strip():
        raise fail("empty: name a profile or a file, or remove the key")
    if _looks_like_path(name):
        candidate = (child.parent / name) if not os.path.isabs(name) else Path(name)
        if not candidate.is_file():
            raise fail("file not found")
        return candidate
    itself = False
    for directory in search_dirs(cwd):
        candidate = directory / f"{name}.toml"
        if candidate.is_file():
            if candidate.resolve() != child.resolve():
                return candidate
            itself = True
    if itself:  # the only profile of that name is this file: "did you mean" itself would be a cycle
        raise fail("the profile extends itself (a cycle); name another profile, or remove the key")
    others = {p.stem for d in search_dirs(cwd) if d.is_dir() for p in d.glob("*.toml") if p.resolve() != child.resolve()}
    raise fail(f"unknown profile{_did_you_mean(name, sorted(others))}")


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict:
    """Child wins key by key inside tables; ``[[ladder.rung]]`` lists are concatenated."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for key, value in override.items():
        if key == "extends":
            continue
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        elif key == "rung" and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


def parse_profile_text(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not a text file in UTF-8 (byte {exc.start}): a profile is TOML text",
                           file=str(path)) from None
    tomllib = _tomllib()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}", file=str(path)) from None
    except RecursionError:  # tomllib parses nested arrays recursively; no profile nests thousands deep
        raise ProfileError(f"{path}: not a profile: its arrays or tables nest too deeply to parse",
                           file=str(path)) from None
    validate(data, path, text)
    _one_spelling(data, path, text)
    return data


# Keys renamed after profiles were written with the old spelling: (table, old) -> new. The loader
# owns the spellings: past it, only the new name exists (merged across ``extends``, shown, recorded).
OLD_SPELLINGS = {
    ("run", "notify_after_s"): "bell_after_s",  # the SPEC's name ("See the run")
}


def _one_spelling(data: dict, path: Path, text: str) -> None:
    for (table, old), new in OLD_SPELLINGS.items():
        values = data.get(table)
        if not isinstance(values, dict) or old not in values:
            continue
        if new in values:
            raise _error_at(path, text, table, old, f"means the same as {table}.{new}, which is set too: keep one "
                                                    f"({new} is the current name)")
        values[new] = values.pop(old)


def _error_at(path: Path, text: str, table: str | None, key: str, message: str, *, shown: str | None = None,
              nth: int = 0) -> ProfileError:
    """The one-line error for ``key`` in ``[table]`` of ``path``: ``FILE:LINE: KEY: message``.
    ``shown`` replaces the dotted key in the message; ``nth`` picks one of several ``[[table]]``."""
    line = _line_of(text, table, key, nth=nth)
    where = f"{path}:{line}" if line else str(path)
    dotted = f"{table}.{key}" if table else key
    return ProfileError(f"{where}: {shown or dotted}: {message}", file=str(path), key=dotted)


def _read_quietly(path: Path) -> str:
    """The text of a profile already parsed once, to place an error found after parsing."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _tomllib() -> Any:
    if sys.version_info >= (3, 11):  # imported here: `gpudoc check` without a profile never parses TOML
        import tomllib
    else:  # pragma: no cover - exercised on 3.9/3.10 only
        import tomli as tomllib
    return tomllib


def validate(data: Mapping[str, Any], path: Path, text: str) -> None:
    def fail(table: str | None, key: str, message: str, shown: str | None = None) -> None:
        raise _error_at(path, text, table, key, message, shown=shown)

    allowed_top = {**schema.TOP_LEVEL, **dict.fromkeys(schema.TABLES, (dict,)), "env": (dict,)}
    for key, value in data.items():
        if key not in allowed_top:
            fail(None, key, f"unknown key{_did_you_mean(key, list(allowed_top))}")
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
                fail(table, key, f"unknown key{_did_you_mean(key, list(keys))}")
            expected = keys[key]
            # bool is an int in Python; an int knob given `true` is a mistake worth naming.
            if isinstance(v, bool) and bool not in expected:
                fail(table, key, f"expected {_type_names(expected)}, got a boolean")
            if not isinstance(v, expected):
                fail(table, key, f"expected {_type_names(expected)}, got {type(v).__name__} {v!r}")
            _check_number(table, key, v, fail)
            choices = schema.ENUMS.get((table, key))
            if choices and v not in choices:
                fail(table, key, f"'{v}' is not one of {', '.join(choices)}{_did_you_mean(str(v), choices)}")
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
    from gpudoc.bind.args import ARG_PRESETS  # only with a [bind] table: `check` stays light

    if preset not in ARG_PRESETS:
        fail("bind", "args", f"unknown preset '{preset}'{_did_you_mean(preset, ARG_PRESETS)}; "
                             f"one of {', '.join(sorted(ARG_PRESETS))}")


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
            fail("ladder.rung", key, f"unknown key{_did_you_mean(key, list(schema.USER_RUNG_KEYS))}")
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


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib  # only on a mistake

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def _line_of(text: str, table: str | None, key: str, nth: int = 0) -> int | None:
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
    toml = _tomllib()
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
