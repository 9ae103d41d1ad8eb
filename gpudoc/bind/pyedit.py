"""Edits of Python config files of the nanoGPT kind: top-level ``name = literal`` lines.

nanoGPT ``exec``s these files, so an assignment's right-hand side (even ``5 * 8``) is replaced
by a literal and everything else — comments, other expressions — stays as written.
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


def load(text: str, name: str = "Python config") -> dict[str, Any]:
    """The literal values of top-level assignments (expressions evaluated when they are pure)."""
    values: dict[str, Any] = {}
    for key, node in _assignments(_tree(text, name)).items():
        try:
            values[key] = ast.literal_eval(node)
        except ValueError:
            values[key] = _arithmetic(node)
    return values


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


def set_value(text: str, path: Sequence[str], value: Any, *, name: str = "Python config") -> str:
    if len(path) != 1:
        raise InputError(f"{name}: '{'.'.join(path)}': a Python config only has top-level names")
    key = path[0]
    node = _assignments(_tree(text, name)).get(key)
    if node is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + f"{key} = {render(value)}" + ("\n" if not sep else "")
    lines = text.splitlines(keepends=True)
    start = _offset(lines, node.lineno, node.col_offset)
    # Parsed from source, so every node has its end position.
    end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
    return text[:start] + render(value, text[start:end]) + text[end:]
