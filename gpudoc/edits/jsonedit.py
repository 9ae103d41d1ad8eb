"""Surgical JSON edits: replace the exact span of one value, leave every other byte alone.

Re-dumping a config with ``json.dump`` would rewrite ``5e8`` as ``500000000.0``,
``1.000000e+09`` as ``1000000000.0``, reorder nothing but reflow everything; users diff these
files in review, so only the bound values may change.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from gpudoc.errors import InputError

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WS = " \t\n\r"


@dataclass
class Node:
    kind: str  # object | array | scalar
    start: int
    end: int
    # object: (key, key_start, key_end, value node); array: (None, -1, -1, value node)
    members: list = field(default_factory=list)


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name

    def fail(self, pos: int, what: str) -> InputError:
        line = self.text.count("\n", 0, pos) + 1
        return InputError(f"{self.name}: line {line}: {what}")

    def ws(self, i: int) -> int:
        n = len(self.text)
        while i < n and self.text[i] in _WS:
            i += 1
        return i

    def value(self, i: int) -> Node:
        i = self.ws(i)
        if i >= len(self.text):
            raise self.fail(i, "unexpected end of JSON")
        ch = self.text[i]
        if ch == "{":
            return self.container(i, "object", "}")
        if ch == "[":
            return self.container(i, "array", "]")
        if ch == '"':
            _, end = json.decoder.scanstring(self.text, i + 1)  # type: ignore[attr-defined]  # public in CPython, absent from typeshed
            return Node("scalar", i, end)
        for lit in ("true", "false", "null"):
            if self.text.startswith(lit, i):
                return Node("scalar", i, i + len(lit))
        m = _NUMBER.match(self.text, i)
        if m and m.end() > i:
            return Node("scalar", i, m.end())
        raise self.fail(i, f"unexpected character {ch!r}")

    def container(self, i: int, kind: str, close: str) -> Node:
        node = Node(kind, i, -1)
        i = self.ws(i + 1)
        if self.text.startswith(close, i):
            node.end = i + 1
            return node
        while True:
            i = self.ws(i)
            if kind == "object":
                if not self.text.startswith('"', i):
                    raise self.fail(i, "expected a key")
                key, key_end = json.decoder.scanstring(self.text, i + 1)  # type: ignore[attr-defined]  # see above
                key_start = i
                i = self.ws(key_end)
                if not self.text.startswith(":", i):
                    raise self.fail(i, "expected ':'")
                child = self.value(i + 1)
                node.members.append((key, key_start, key_end, child))
            else:
                child = self.value(i)
                node.members.append((None, -1, -1, child))
            i = self.ws(child.end)
            if self.text.startswith(",", i):
                i += 1
                continue
            if self.text.startswith(close, i):
                node.end = i + 1
                return node
            raise self.fail(i, f"expected ',' or '{close}'")


def parse_spans(text: str, name: str = "JSON") -> Node:
    parser = _Parser(text, name)
    root = parser.value(0)
    if parser.ws(root.end) != len(text):
        raise parser.fail(root.end, "extra data after the JSON value")
    return root


def render(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return repr(value)
    return json.dumps(value)


def _line_indent(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    line = text[start:pos]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _indent_step(text: str) -> str:
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            return line[: len(line) - len(stripped)]
    return "  "


def _render_nested(path: Sequence[str], value: Any, indent: str, step: str, sep: str) -> str:
    """``{"a": {"b": value}}`` for a missing intermediate path, laid out like the file."""
    if not path:
        return render(value)
    inner = _render_nested(path[1:], value, indent + step, step, sep)
    return "{\n" + indent + step + json.dumps(path[0]) + sep + inner + "\n" + indent + "}"


def _find(node: Node, key: str) -> Node | None:
    if node.kind == "object":
        for k, _, _, child in node.members:
            if k == key:
                return child
    elif node.kind == "array" and key.isdigit() and int(key) < len(node.members):
        return node.members[int(key)][3]
    return None


def set_value(text: str, path: Sequence[str], value: Any, *, name: str = "JSON") -> str:
    """Return ``text`` with the value at ``path`` replaced (or created under an existing object)."""
    root = parse_spans(text, name)
    node = root
    for depth, key in enumerate(path):
        _refuse_duplicate(text, node, path[:depth + 1], name)
        child = _find(node, key)
        if child is None:
            if node.kind != "object":
                raise InputError(f"{name}: cannot create '{'.'.join(path)}': "
                                 f"'{'.'.join(path[:depth]) or '(top)'}' is not an object")
            return _insert(text, node, list(path[depth:]), value)
        node = child
    return text[: node.start] + render(value) + text[node.end:]


def _refuse_duplicate(text: str, obj: Node, path: Sequence[str], name: str) -> None:
    """A key written twice in one object: ``json.loads`` keeps the last, an edit would reach the
    first, and a reader that checks for duplicates refuses the file."""
    starts = [key_start for key, key_start, _, _ in obj.members if obj.kind == "object" and key == path[-1]]
    if len(starts) > 1:
        numbers = [str(text.count("\n", 0, pos) + 1) for pos in starts]
        lines = ", ".join(numbers[:-1]) + " and " + numbers[-1]
        times = "twice" if len(starts) == 2 else f"{len(starts)} times"
        raise InputError(f"{name}: '{'.'.join(path)}' appears {times} (lines {lines}); readers disagree on which "
                         f"counts (most keep the last, some refuse the file): remove the others, then run gpudoc "
                         f"again", file=name, key=".".join(path))


def _insert(text: str, obj: Node, path: list[str], value: Any) -> str:
    """Add a member as the object's *first* one: no existing line changes (no comma to add)."""
    step = _indent_step(text)
    if obj.members:
        _, key_start, key_end, first = obj.members[0]
        sep = text[key_end:first.start]  # ": " or ":" as the file writes it
        multiline = "\n" in text[obj.start + 1:key_start]
        indent = _line_indent(text, key_start) if multiline else ""
        body = json.dumps(path[0]) + sep + _render_nested(path[1:], value, indent, step, sep)
        return text[:key_start] + body + ("," + "\n" + indent if multiline else ", ") + text[key_start:]
    outer = _line_indent(text, obj.start)
    indent = outer + step
    body = json.dumps(path[0]) + ": " + _render_nested(path[1:], value, indent, step, ": ")
    return text[: obj.start + 1] + "\n" + indent + body + "\n" + outer + text[obj.end - 1:]


def load(text: str, name: str = "JSON") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
