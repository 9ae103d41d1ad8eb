"""Find, parse, merge (``extends``) and validate profiles.

Lookup (SPEC): ``-p PATH`` names a file; ``-p NAME`` or ``GPUDOC_PROFILE`` is searched in the
project's ``.gpudoc/profiles/`` (the nearest from the working directory up, as the run records are),
``$XDG_CONFIG_HOME/gpudoc/profiles/`` and the shipped ``profiles/``;
with no name, the nearest ``gpudoc.toml`` from the working directory up (as far as the run
records are looked for, ``gpudoc.upward``) is used, else the job runs without a profile.

Trust (SPEC, ``gpudoc.trust``): a profile found by looking (``./gpudoc.toml``, a name in the search
directories, a parent named by ``extends``) that another user owns or can write is skipped with
one line, and the search goes on (the shipped profile of that name answers); one the user named
(``-p FILE``, ``GPUDOC_PROFILE``, ``extends = "FILE"``) is refused, as is a ``./gpudoc.toml`` that
names code to run: skipping it would leave the user wondering why their factory or notify command
never ran.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Mapping

from gpudoc.errors import ProfileError
from gpudoc.profiles import schema
from gpudoc.profiles.model import EMPTY, Profile
from gpudoc.profiles.validate import did_you_mean, error_at, line_of, read_quietly, toml_parser, validate
from gpudoc.trust import Refused, Untrusted, untrusted
from gpudoc.upward import project_folders

PROJECT_PROFILE = "gpudoc.toml"

# What a skipped profile's line goes through: the command's console (``Workspace.load_profile``).
Say = Callable[[str], None]

# The keys of a profile that make gpudoc run code: the simulation imports the factory's module,
# `run` runs the notify command through the shell.
CODE_KEYS = (("model", "factory"), ("run", "notify"))
# A profile is a page of TOML; a bigger file found by looking is not read to see what it names.
_MAX_PEEK_BYTES = 1 << 20


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")


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
    return [project_profiles_dir(cwd), Path(xdg) / "gpudoc" / "profiles", shipped_profiles_dir()]


def project_profiles_dir(cwd: Path) -> Path:
    """The project's named profiles: the nearest ``.gpudoc/profiles`` from ``cwd`` up, as far as the
    run records are looked for (``gpudoc.upward``), so ``-p NAME`` answers the same from a
    subdirectory; else ``./.gpudoc/profiles``."""
    for folder in project_folders(cwd):
        if (Path(folder) / ".gpudoc" / "profiles").is_dir():
            return Path(folder) / ".gpudoc" / "profiles"
    return cwd / ".gpudoc" / "profiles"


def _looks_like_path(name: str) -> bool:
    return name.endswith(".toml") or os.sep in name or name.startswith(".")


def resolve_profile_path(name: str | None, cwd: Path | None = None, say: Say | None = None) -> Path | None:
    """The file a ``-p`` value (or ``GPUDOC_PROFILE``, or nothing) refers to; None = no profile.
    A profile found by looking that fails the trust rule is skipped (``say`` gets the line)."""
    cwd = cwd or Path.cwd()
    say = say or _stderr
    name = name or os.environ.get("GPUDOC_PROFILE") or None
    if name is None:
        return _project_profile(cwd, say)
    if _looks_like_path(name):
        path = (cwd / name) if not os.path.isabs(name) else Path(name)
        if not path.is_file():
            if os.path.lexists(path):
                raise ProfileError(f"{name}: not a profile file ({_file_kind(path)})", file=str(path))
            raise ProfileError(f"profile file not found: {name}", file=str(path))
        _distrust(path, named=True)
        return path
    found = _first_trusted([directory / f"{name}.toml" for directory in search_dirs(cwd)], name, say)
    if found is not None:
        return found
    known = sorted(list_profile_names(cwd, say=lambda line: None))  # each skipped file was said above
    hint = did_you_mean(name, known)
    raise ProfileError(f"unknown profile '{name}'{hint} (see `gpudoc profile list`)")


def _project_profile(cwd: Path, say: Say) -> Path | None:
    """The nearest ``gpudoc.toml`` from ``cwd`` up, where the run records are looked for too
    (``gpudoc.upward``): a job started from a subdirectory of its project runs under the project's
    profile. One that fails the trust rule is skipped in one line and the search goes on (one that
    names code to run is refused)."""
    skipped: list[Untrusted] = []
    found = None
    for folder in project_folders(cwd):
        project = Path(folder) / PROJECT_PROFILE
        if project.is_file():
            problem = _distrust(project, project=True)
            if problem is None:
                found = project
                break
            skipped.append(problem)
        elif os.path.lexists(project):  # a directory, a dangling link, a fifo: not silently "no profile"
            raise ProfileError(f"{project}: not a profile file ({_file_kind(project)})", file=str(project))
    for problem in skipped:
        say(_skipped(problem, f"using {found}" if found is not None else "running without a profile"))
    return found


def _first_trusted(candidates: list[Path], name: str, say: Say) -> Path | None:
    """The first of ``candidates`` that is a file gpudoc may read; each skipped before it is said
    in one line, with the profile that answers instead."""
    skipped = []
    found = None
    for candidate in candidates:
        if candidate.is_file():
            problem = _distrust(candidate)
            if problem is None:
                found = candidate
                break
            skipped.append(problem)
    instead = f"using {found}" if found is not None else f"no other profile is named '{name}'"
    for problem in skipped:
        say(_skipped(problem, instead))
    return found


def _distrust(path: Path, *, named: bool = False, project: bool = False) -> Untrusted | None:
    """None when gpudoc may read the profile ``path`` (a shipped one always: it is gpudoc's own);
    else why not, for the caller to skip it with ``_skipped``'s line.

    A profile the user ``named``, or the ``project`` profile (``./gpudoc.toml``) when it names code
    to run, raises ``Refused`` instead."""
    if _is_shipped(path):
        return None
    problem = untrusted(path)
    if problem is None:
        return None
    code = names_code(path) if project else []
    if named or code:
        what = f"it names code to run ({', '.join(code)}), " if code else ""
        raise Refused(f"{problem}: {what}refused as a profile ({problem.remedy})", file=str(path))
    return problem


def _skipped(problem: Untrusted, instead: str) -> str:
    return f"gpudoc: {problem}: skipped ({instead}; {problem.remedy})"


def names_code(path: Path) -> list[str]:
    """The keys of ``CODE_KEYS`` the profile sets, read without validating it (a file gpudoc will
    not use is looked at, never parsed into a profile); [] when it cannot be read as TOML."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_PEEK_BYTES + 1)
        data = toml_parser().loads(raw.decode("utf-8")) if len(raw) <= _MAX_PEEK_BYTES else {}
    except (OSError, ValueError, RecursionError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        return []
    return [f"[{table}] {key}" for table, key in CODE_KEYS
            if isinstance(data.get(table), dict) and data[table].get(key)]


def _is_shipped(path: Path) -> bool:
    try:
        return path.resolve().parent == shipped_profiles_dir().resolve()
    except (OSError, RuntimeError):
        return False


def _file_kind(path: Path) -> str:
    if path.is_dir():
        return "a directory"
    if path.is_symlink() and not path.exists():
        return "a link to nothing"
    return "not a regular file"


def list_profile_names(cwd: Path | None = None, say: Say | None = None) -> dict[str, Path]:
    """Every profile name visible from here; earlier search directories shadow later ones, unless
    they fail the trust rule (``say`` gets the line, the next directory's profile answers)."""
    say = say or _stderr
    names = sorted({path.stem for directory in search_dirs(cwd) if directory.is_dir()
                    for path in directory.glob("*.toml")})
    found: dict[str, Path] = {}
    for name in names:
        path = _first_trusted([directory / f"{name}.toml" for directory in search_dirs(cwd)], name, say)
        if path is not None:
            found[name] = path
    return found


def load_profile(name: str | None = None, cwd: Path | None = None, say: Say | None = None) -> Profile:
    path = resolve_profile_path(name, cwd, say)
    if path is None:
        return EMPTY
    return load_profile_file(path, cwd=cwd, say=say)


def load_profile_file(path: Path, cwd: Path | None = None, say: Say | None = None) -> Profile:
    """The profile in ``path``, its ``extends`` chain merged; every file of the chain is held to
    the trust rule (``say`` gets the line of a parent skipped by name)."""
    chain: list[Path] = []
    rung_files: list[Path] = []
    merged = _load_chain(Path(path), chain, cwd, rung_files, say or _stderr)
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
        text = read_quietly(leaf)
        check_files_table(files, dict(merged.get("train") or {}), enums, str(leaf),
                          line_of=lambda table, key: line_of(text, table, key))


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
        hint = did_you_mean(knob, known)
        if hint:
            nth = sum(1 for p in rung_files[:index] if p == path)
            raise error_at(path, read_quietly(path), "ladder.rung", "knob",
                            f"rung '{rung['name']}': '{knob}' is not a knob in [train]{hint}", nth=nth)


MAX_EXTENDS_DEPTH = 32  # a real chain is two or three deep; this stops a runaway before the stack does


def _load_chain(path: Path, chain: list[Path], cwd: Path | None, rung_files: list[Path], say: Say) -> dict:
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
    _distrust(path, named=True)  # the file given, or a parent already chosen by name
    data = parse_profile_text(path)
    own_rungs = [path] * len(dict(data.get("ladder") or {}).get("rung") or [])
    if "extends" not in data:
        rung_files.extend(own_rungs)
        return data
    # A parent is looked up like -p NAME, but a profile never extends itself by name: skip the
    # directory the child lives in when the names match (gpudoc.toml extends "a10g-24gb" is fine,
    # .gpudoc/profiles/a10g-24gb.toml extending "a10g-24gb" means the shipped one).
    parent_path = _resolve_parent(data["extends"], path, cwd, say)
    parent = _load_chain(parent_path, chain, cwd, rung_files, say)
    rung_files.extend(own_rungs)  # merge() puts a child's rungs after its parents'
    return merge(parent, data)


def _resolve_parent(name: str, child: Path, cwd: Path | None, say: Say) -> Path:
    def fail(message: str) -> ProfileError:
        return error_at(child, read_quietly(child), None, "extends", message, shown=f"extends = '{name}'")

    if not name.strip():
        raise fail("empty: name a profile or a file, or remove the key")
    if _looks_like_path(name):
        candidate = (child.parent / name) if not os.path.isabs(name) else Path(name)
        if not candidate.is_file():
            raise fail("file not found")
        return candidate
    candidates = [directory / f"{name}.toml" for directory in search_dirs(cwd)]
    itself = any(c.is_file() and c.resolve() == child.resolve() for c in candidates)
    found = _first_trusted([c for c in candidates if not (c.is_file() and c.resolve() == child.resolve())], name, say)
    if found is not None:
        return found
    if itself:  # the only profile of that name is this file: "did you mean" itself would be a cycle
        raise fail("the profile extends itself (a cycle); name another profile, or remove the key")
    others = {p.stem for d in search_dirs(cwd) if d.is_dir() for p in d.glob("*.toml") if p.resolve() != child.resolve()}
    raise fail(f"unknown profile{did_you_mean(name, sorted(others))}")


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
    tomllib = toml_parser()
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
# Keys that moved to another table: (table, key) -> the table that holds them now.
OLD_PLACES = {
    ("model", "lora_targets"): "train",  # with the knobs, where users write it
}


def _one_spelling(data: dict, path: Path, text: str) -> None:
    for (table, old), new in OLD_SPELLINGS.items():
        values = data.get(table)
        if not isinstance(values, dict) or old not in values:
            continue
        if new in values:
            raise error_at(path, text, table, old, f"means the same as {table}.{new}, which is set too: keep one "
                                                    f"({new} is the current name)")
        values[new] = values.pop(old)
    for (table, key), now in OLD_PLACES.items():
        values = data.get(table)
        if not isinstance(values, dict) or key not in values:
            continue
        if key in data.get(now, {}):
            raise error_at(path, text, table, key, f"means the same as {now}.{key}, which is set too: keep one "
                                                    f"([{now}] is where it belongs)")
        data.setdefault(now, {})[key] = values.pop(key)
