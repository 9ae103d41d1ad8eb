"""YAML edits that change only the bound scalars.

ruamel.yaml's round-trip dump is good but not byte-exact (it re-indents sequences, drops
trailing spaces, rewrites some flow lists), so it is used here to *locate* each value (line and
column) and to *verify* the result; the edit itself replaces the scalar's characters on its
line. Interpolations (``${...}``) and ``???`` placeholders are plain scalars to YAML and are never rewritten.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any, Sequence

from gpudoc.errors import InputError

_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n"}


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    return yaml


def load(text: str, name: str = "YAML") -> Any:
    from ruamel.yaml.error import YAMLError

    try:
        return _yaml().load(io.StringIO(text))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(f"{name}: {where}not valid YAML: {getattr(exc, 'problem', exc)}") from None


def plain(data: Any) -> Any:
    """ruamel's commented containers and scalar subclasses as plain Python values."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    if isinstance(data, bool) or data is None:
        return data
    if isinstance(data, int):
        return int(data)
    if isinstance(data, float):
        return float(data)
    if isinstance(data, str):
        return str(data)
    return data


def _safe_plain(text: str) -> bool:
    """Would ``text`` read back as this same string when written unquoted?"""
    if not text or text != text.strip() or text[0] in "!&*[]{}|>'\"%@`#,?:-" or "\n" in text:
        return False
    if ": " in text or " #" in text or text.endswith(":"):
        return False
    from ruamel.yaml import YAML

    try:
        return YAML(typ="safe", pure=True).load("k: " + text + "\n") == {"k": text}
    except Exception:
        return False


def render_scalar(value: Any, old_token: str | None) -> str:
    """The YAML spelling of ``value``, in the style of the token it replaces."""
    quote = old_token[0] if old_token and old_token[0] in "'\"" else None
    if isinstance(value, bool):
        word = "true" if value else "false"
        if old_token and old_token.strip("'\"").lower() in _BOOL_WORDS:
            raw = old_token.strip("'\"")
            if raw[:1].isupper():
                word = word.capitalize()
            if raw.isupper() and len(raw) > 1:
                word = word.upper()
        return word
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    text = str(value)
    if quote == "'":
        return "'" + text.replace("'", "''") + "'"
    if quote == '"' or not _safe_plain(text):
        return json.dumps(text)
    return text


def _scalar_end(line: str, col: int) -> int:
    """End column of the scalar starting at ``col`` (quoted or plain, one line)."""
    ch = line[col:col + 1]
    if ch == "'":
        i = col + 1
        while i < len(line):
            if line[i] == "'":
                if line[i + 1:i + 2] == "'":
                    i += 2
                    continue
                return i + 1
            i += 1
        raise ValueError("multi-line quoted scalar")
    if ch == '"':
        i = col + 1
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] == '"':
                return i + 1
            i += 1
        raise ValueError("multi-line quoted scalar")
    if ch in ("|", ">", "[", "{", "&", "*", "!"):
        raise ValueError("not a plain scalar")
    m = re.search(r"\s#", line[col:])
    end = col + m.start() if m else len(line.rstrip("\r\n"))
    while end > col and line[end - 1] in " \t":
        end -= 1
    return end


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _indent_step(text: str) -> int:
    for line in _lines(text):
        stripped = line.lstrip(" ")
        if stripped.strip() and not stripped.startswith("#") and len(stripped) < len(line):
            return len(line) - len(stripped)
    return 2


def _block_end(lines: list[str], key_line: int, indent: int) -> int:
    """Index of the last line that belongs to the value of the key on ``key_line``."""
    last = key_line
    for i in range(key_line + 1, len(lines)):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        lead = len(line) - len(line.lstrip(" "))
        if lead > indent or (lead == indent and stripped.startswith("- ")):
            last = i
            continue
        break
    return last


def _insert_line(lines: list[str], after: int, new_line: str) -> list[str]:
    out = list(lines)
    if after >= 0 and not out[after].endswith("\n"):
        # The file has no final newline: keep it that way.
        out[after] = out[after] + "\n"
        out.insert(after + 1, new_line.rstrip("\n"))
    else:
        out.insert(after + 1, new_line)
    return out


def set_value(text: str, path: Sequence[str], value: Any, *, name: str = "YAML") -> str:
    """Return ``text`` with the scalar at ``path`` replaced, or a new key added to its mapping."""
    data = load(text, name)
    dotted = ".".join(path)
    if data is None:
        data = {}
    node = data
    lines = _lines(text)
    for depth, key in enumerate(path[:-1]):
        child = _child(node, key)
        if child is _MISSING:
            _refuse_shared(data, path[:depth], name, dotted)
            return _create(text, lines, node, list(path[depth:]), value, name, dotted)
        _refuse_merged(node, key, name, dotted)
        if not isinstance(child, (dict, list)):
            raise InputError(f"{name}: cannot set '{dotted}': '{'.'.join(path[:depth + 1])}' is not a mapping")
        node = child
    leaf = path[-1]
    if _child(node, leaf) is _MISSING:
        _refuse_shared(data, path[:-1], name, dotted)
        return _create(text, lines, node, [leaf], value, name, dotted)
    _refuse_merged(node, leaf, name, dotted)
    _refuse_shared(data, path, name, dotted)
    if isinstance(node, list):
        line_no, col = node.lc.item(int(leaf))  # type: ignore[attr-defined]  # ruamel CommentedSeq
    else:
        line_no, col = node.lc.value(leaf)
        key_line, key_col = node.lc.key(leaf)
        current = node[leaf]
        if isinstance(current, (dict, list)):
            raise InputError(f"{name}: cannot set '{dotted}': it holds a {type(current).__name__}, not a value")
        if current is None and (line_no != key_line):
            # ``key:`` with nothing after it: ruamel points at the next line; write after the colon.
            line = lines[key_line]
            colon = line.index(":", key_col + len(str(leaf))) + 1
            lines[key_line] = line[:colon] + " " + render_scalar(value, None) + line[colon:]
            return "".join(lines)
    line = lines[line_no]
    anchor = _ANCHOR.match(line, col)
    if anchor:  # ``key: &name value`` that no alias uses: the value after the anchor is edited
        col = anchor.end()
    try:
        end = _scalar_end(line, col)
    except ValueError:
        raise InputError(f"{name}: line {line_no + 1}: '{dotted}' is not a one-line value gpudoc can edit") from None
    old_token = line[col:end]
    new_token = render_scalar(value, old_token)
    if not old_token and line[col - 1:col] == ":":
        new_token = " " + new_token  # ``key:  # comment`` (null): keep ``key: value``
    lines[line_no] = line[:col] + new_token + line[end:]
    return "".join(lines)


_MISSING = object()
_ANCHOR = re.compile(r"&[^\s,\[\]{}]+[ \t]+(?=[^\s#])")


def _own_keys(node: dict) -> list:
    """A mapping's keys without those it merges in (``<<: *anchor``), which have no line here."""
    if hasattr(node, "non_merged_items"):
        return [k for k, _ in node.non_merged_items()]
    return list(node.keys())


def _refuse_merged(node: Any, key: str, name: str, dotted: str) -> None:
    """A key a mapping gets from ``<<: *anchor``: its value is written in the anchored mapping,
    which other mappings may merge too, so there is no line of this key's own to edit."""
    if isinstance(node, dict) and key not in _own_keys(node):
        source = next((m for m in getattr(node, "merge", ()) if key in m), None)
        anchor = getattr(getattr(source, "anchor", None), "value", None) or "anchor"
        raise InputError(f"{name}: '{dotted}' comes from a YAML merge key ('<<: *{anchor}'): its value lives in "
                         f"the anchored mapping, which other keys may share, so gpudoc cannot edit it in place; "
                         f"give '{dotted}' its own line (it overrides the merge) or edit the file by hand", file=name, key=dotted)


def _refuse_shared(data: Any, path: Sequence[str], name: str, dotted: str) -> None:
    """A value or mapping on ``path`` (the way to ``dotted``) that has an anchor (``&mbs 2``) which
    an alias (``*mbs``) or a merge (``<<: *mbs``) repeats elsewhere: one edit would change every
    key that shares it."""
    node = data
    for depth, key in enumerate(path):
        node = _child(node, key)
        anchor = getattr(getattr(node, "anchor", None), "value", None)
        if anchor is not None and _uses(data, node, set()) > 1:
            held = ".".join(path[:depth + 1])
            raise InputError(f"{name}: '{held}' shares the YAML anchor &{anchor} with other keys (*{anchor}); "
                             f"editing '{dotted}' would change them too; give it a value of its own or "
                             f"edit the file by hand", file=name, key=dotted)


def _uses(node: Any, value: Any, seen: set[int]) -> int:
    """How many places hold ``value`` itself: an anchored value is one object, however often an
    alias or a merge key repeats it."""
    if node is value:
        return 1
    if not isinstance(node, (dict, list)) or id(node) in seen:
        return 0
    seen.add(id(node))
    if isinstance(node, dict):
        children = [node[k] for k in _own_keys(node)] + list(getattr(node, "merge", ()))
    else:
        children = list(node)
    return sum(_uses(child, value, seen) for child in children)


def _child(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key, _MISSING)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return _MISSING


def _create(text: str, lines: list[str], parent: Any, rest: list[str], value: Any,
            name: str, dotted: str) -> str:
    if not isinstance(parent, dict):
        raise InputError(f"{name}: cannot create '{dotted}' inside a list")
    step = _indent_step(text)
    keys = _own_keys(parent)
    if keys:
        positions = parent.lc  # type: ignore[attr-defined]  # ruamel CommentedMap: where each key sits
        indent = positions.key(keys[0])[1]
        if any(positions.key(k)[0] == positions.key(keys[0])[0] for k in keys[1:]):
            raise InputError(f"{name}: cannot create '{dotted}' inside a flow mapping")
        after = _block_end(lines, positions.key(keys[-1])[0], indent)
    elif getattr(parent, "merge", None):
        raise InputError(f"{name}: cannot create '{dotted}' inside a mapping that only merges another ('<<: *anchor')")
    elif parent is not None and hasattr(parent, "lc") and lines:
        raise InputError(f"{name}: cannot create '{dotted}' inside an empty mapping")
    else:
        indent, after = 0, len(lines) - 1
    new = []
    for depth, key in enumerate(rest):
        pad = " " * (indent + depth * step)
        if depth == len(rest) - 1:
            new.append(f"{pad}{key}: {render_scalar(value, None)}\n")
        else:
            new.append(f"{pad}{key}:\n")
    out = lines
    for offset, line in enumerate(new):
        out = _insert_line(out, after + offset, line)
    return "".join(out)
