"""Edits of Python config files: top-level ``name = literal`` lines and the keys of dict literals.

Such files are ``exec``'d by the job (nanoGPT's are), so an assignment's right-hand side (even
``5 * 8``) is replaced by a literal and everything else — comments, other expressions — stays as written. Projects that
keep a ``TRAINING_CONFIG = {...}`` dict (or ``dict(key=value, ...)``) are reached by key:
``TRAINING_CONFIG.per_device_train_batch_size`` or ``TRAINING_CONFIG["per_device_train_batch_size"]``
(nested dicts too); only the value's own characters change. A missing top-level name is appended;
a key missing from a dict is refused, since gpudoc cannot know where in the literal it belongs.
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from gpudoc.errors import InputError


def _tree(text: str, name: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise InputError(f"{name}: line {exc.lineno}: not valid Python: {exc.msg}") from None


def _assignments(tree: ast.Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            found[stmt.targets[0].id] = stmt.value  # a later assignment wins, as in exec
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            found[stmt.target.id] = stmt.value
    return found


def _members(node: ast.expr) -> list[tuple[str, ast.expr]] | None:
    """A dict literal's (key, value) pairs, string and number keys only; None when not a dict."""
    if isinstance(node, ast.Dict):
        return [(str(k.value), v) for k, v in zip(node.keys, node.values)
                if isinstance(k, ast.Constant) and isinstance(k.value, (str, int)) and not isinstance(k.value, bool)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return [(kw.arg, kw.value) for kw in node.keywords if kw.arg is not None]
    return None


def _value(node: ast.expr) -> Any:
    """A literal's value; a dict's keys each on their own (one unknown value spoils only itself);
    None for what gpudoc cannot know (a name, a call)."""
    members = _members(node)
    if members is not None:
        return {key: _value(child) for key, child in members}
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _arithmetic(node)


def load(text: str, name: str = "Python config") -> dict[str, Any]:
    """The values of top-level assignments (expressions evaluated when they are pure)."""
    return {key: _value(node) for key, node in _assignments(_tree(text, name)).items()}


_ARITHMETIC = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Tuple, ast.List, ast.Load)


def _arithmetic(node: ast.expr) -> Any:
    """``5 * 8``, ``2 ** 10``: arithmetic on literals, evaluated; anything else (a name, a call, an
    attribute) is not a value gpudoc can know, so None."""
    if not all(isinstance(part, _ARITHMETIC) for part in ast.walk(node)):
        return None
    try:
        # Only literals and operators reach here (checked just above), evaluated without builtins.
        return eval(compile(ast.Expression(node), "<config>", "eval"), {"__builtins__": {}}, {})  # noqa: S307
    except Exception:
        return None


def render(value: Any, old_token: str | None = None) -> str:
    if isinstance(value, str) and old_token and old_token[:1] in "'\"" and old_token[0] not in value:
        return old_token[0] + value + old_token[0]
    return repr(value)


def _offset(lines: list[str], lineno: int, col_bytes: int) -> int:
    line = lines[lineno - 1]
    col = len(line.encode("utf-8")[:col_bytes].decode("utf-8"))
    return sum(len(x) for x in lines[: lineno - 1]) + col


def _locate(node: ast.expr, path: Sequence[str], name: str) -> ast.expr:
    """The node of ``path[1:]`` inside the literal ``node`` (the value of ``path[0]``)."""
    for depth, key in enumerate(path[1:], start=1):
        members = _members(node)
        where = ".".join(path[:depth])
        if members is None:
            raise InputError(f"{name}: cannot set '{'.'.join(path)}': '{where}' is not a dict literal")
        found = [child for k, child in members if k == key]
        if not found:
            keys = ", ".join(k for k, _ in members) or "none"
            raise InputError(f"{name}: '{'.'.join(path)}' is not in the file: '{where}' has no key "
                             f"'{key}' (its keys: {keys})")
        node = found[-1]  # a repeated key: the last one wins, as in Python
    return node


def set_value(text: str, path: Sequence[str], value: Any, *, name: str = "Python config") -> str:
    key = path[0]
    node = _assignments(_tree(text, name)).get(key)
    if node is None:
        if len(path) > 1:
            raise InputError(f"{name}: '{'.'.join(path)}' is not in the file: no top-level '{key} = ...'")
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + f"{key} = {render(value)}" + ("\n" if not sep else "")
    node = _locate(node, path, name)
    lines = text.splitlines(keepends=True)
    start = _offset(lines, node.lineno, node.col_offset)
    # Parsed from source, so every node has its end position.
    end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
    return text[:start] + render(value, text[start:end]) + text[end:]
