"""The job's own source, for a framework to ask what it names: the names it imports, never one flag.

A flag such as ``--output_dir`` or ``--learning_rate`` is every training script's; a hand-written
argparse loop that has one is no HF Trainer job, and taking the Trainer's defaults for it would put
numbers in the reading the job never runs with. The script's source (and the modules of the job's
own tree it imports, as Python resolves them from the script's folder and the working directory) is
parsed, never run; each framework (``gpudoc.frameworks``) asks it its own question.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoc.job.argv import JobCommand

# A job's own tree is a few files deep from its script; a bound keeps a vendored monorepo cheap.
_MAX_DEPTH = 3
_MAX_FILES = 40
_MAX_BYTES = 1 << 20


def source_mentions(job: JobCommand, cwd: Path, *texts: str) -> bool | None:
    """Whether the script's own text holds any of ``texts`` (nanoGPT's ``configurator.py``, or the
    ``exec(`` it runs config files with); None: unread."""
    path = _entry_file(job, cwd)
    if path is None:
        return None
    try:
        source = path.read_text(encoding="utf-8", errors="replace")[:_MAX_BYTES]
    except OSError:
        return None
    return any(text in source for text in texts)


def job_sources(job: JobCommand, cwd: Path) -> Iterator[ast.Module]:
    """The script's parsed source, then the job's own modules it imports (breadth first, bounded)."""
    entry = _entry_file(job, cwd)
    if entry is None:
        return
    roots = [entry.parent, cwd]
    queue: list[tuple[Path, int]] = [(entry, 0)]
    seen: set[Path] = set()
    while queue and len(seen) < _MAX_FILES:
        path, depth = queue.pop(0)
        resolved = path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        tree = _parse(path)
        if tree is None:
            continue
        yield tree
        if depth < _MAX_DEPTH:
            queue.extend((found, depth + 1) for found in _local_imports(tree, path, roots))


def _entry_file(job: JobCommand, cwd: Path) -> Path | None:
    """The script's file: ``train.py``, or ``python -m pkg.train`` found in the job's tree."""
    script = job.script
    if not script:
        return None
    if script.endswith(".py"):
        path = cwd / script
        return path if path.is_file() else None  # `python <(...)`: a pipe would block, or lose the job its bytes
    if all(part.isidentifier() for part in script.split(".")):
        return _module_file(script.split("."), [cwd])
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _module_file(parts: list[str], roots: list[Path]) -> Path | None:
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate
    return None


def _local_imports(tree: ast.Module, path: Path, roots: list[Path]) -> Iterator[Path]:
    """Files of the job's own tree that ``tree`` imports (an installed package is not read: it is
    not on these roots)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _module_file(alias.name.split("."), roots)
                if found is not None:
                    yield found
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from .x import y: beside this file, or higher for ..x
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                search = [base]
            else:
                search = roots
            parts = node.module.split(".") if node.module else []
            found = _module_file(parts, search) if parts else None
            if found is not None:
                yield found
            for alias in node.names:  # from pkg import module
                sub = _module_file([*parts, alias.name], search)
                if sub is not None:
                    yield sub


def argparse_defaults(job: JobCommand, cwd: Path) -> dict[str, Any]:
    """The options the script's own ``add_argument`` calls declare, with the default each takes when
    the command leaves it out: ``default=`` when a constant, ``store_true`` False, ``store_false``
    True (``for flag in ("--bf16", "--fp16"): p.add_argument(flag, ...)`` declares each). A script's
    own default is the job's value, where a framework's would be a guess."""
    return {flag: value for flags, value in argparse_options(job, cwd) for flag in flags if flag.startswith("--")}


def argparse_options(job: JobCommand, cwd: Path) -> list[tuple[list[str], Any]]:
    """Each option the script's ``add_argument`` calls declare with a default (as ``argparse_defaults``
    takes it): all its spellings (``-p``, ``--pipeline-parallel-size``) and that default."""
    entry = _entry_file(job, cwd)
    tree = _parse(entry) if entry is not None else None
    found: list[tuple[list[str], Any]] = []
    if tree is None:
        return found
    loops: dict[int, tuple[str, list[str]]] = {}  # id(call) -> (loop variable, the names it takes)
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)):
            names = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                loops[id(inner)] = (node.target.id, names)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        flags: list[str] = []
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                flags.append(arg.value)
            elif isinstance(arg, ast.Name) and id(node) in loops and loops[id(node)][0] == arg.id:
                flags.extend(loops[id(node)][1])
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        action = keywords.get("action")
        default = keywords.get("default")
        if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
            value: Any = action.value == "store_false"
        elif isinstance(default, ast.Constant) and default.value is not None:
            value = default.value
        else:
            continue
        found.append(([flag for flag in flags if flag.startswith("-")], value))
    return found
