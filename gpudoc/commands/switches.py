"""A command's switches as one plain table, and the parser of its common command lines.

`gpudoc run` (every launch) and `gpudoc check` (before every launch, in scripts) start often, so
their usual command lines are parsed here without importing plumbum (~40 ms of a ~0.1 s start).
The plumbum command of each is built from the same table (``gpudoc.cli.base.switch_attributes``),
so the two parsers cannot drift apart. This parser only takes what it is sure plumbum reads the
same way; for anything else (help, version, an unknown or repeated switch, a value it would have to
guess about, a bad count) it answers None and plumbum parses the line, errors included, as always.
"""

from __future__ import annotations

from typing import Any

# (names, attribute, value kind, argname, help). Kinds: None, a flag; "str", one value; "list", a
# value that may be given again (the values in order); "count", a whole number from 0 to the
# caller's ``max_count``; "optional", a flag that may carry a value after "=" (``--wait``,
# ``--wait=600``): alone it is ``OPTIONAL_ALONE``, it never takes the next argument.
Switch = tuple[tuple[str, ...], str, "str | None", str, str]


OPTIONAL_ALONE = "inf"


def takes_value(switches: tuple[Switch, ...]) -> dict[str, bool]:
    """Each switch name without its dashes: whether it takes the next argument as its value."""
    return {name.lstrip("-"): kind not in (None, "optional") for names, _, kind, _, _ in switches for name in names}


def spelled_out(args: list[str], switches: tuple[Switch, ...]) -> list[str]:
    """An optional-value switch given alone, written with its value (``--wait`` -> ``--wait=inf``),
    before ``--``: plumbum knows no optional values."""
    alone = {name for names, _, kind, _, _ in switches if kind == "optional" for name in names}
    end = args.index("--") if "--" in args else len(args)
    return [f"{a}={OPTIONAL_ALONE}" if i < end and a in alone else a for i, a in enumerate(args)]


def defaults(switches: tuple[Switch, ...]) -> dict[str, Any]:
    """What each attribute is when its switch is not given (plumbum's defaults, by kind)."""
    empty: dict[str | None, Any] = {None: False, "str": None, "count": 0, "optional": None}
    return {attr: [] if kind == "list" else empty[kind] for _, attr, kind, _, _ in switches}


def parse_switches(args: list[str], switches: tuple[Switch, ...], *,
                   max_count: int = 0) -> tuple[dict[str, Any], list[str]] | None:
    """The values of the switches given (by attribute) and the arguments after ``--``; None for
    anything plumbum should parse instead (see the module's docstring), an argument before
    ``--`` included."""
    by_name = {name: (attr, kind) for names, attr, kind, _, _ in switches for name in names}
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return values, args[i + 1:]
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
        elif arg.startswith("-") and len(arg) > 1:
            name, inline = arg[:2], arg[2:]
            eq = "=" if inline else ""
        else:
            return None  # an argument: the command's own rule (or plumbum's error)
        if name not in by_name:
            return None
        attr, kind = by_name[name]
        if attr in values and kind != "list":
            return None
        if kind is None:
            if eq:
                return None
            values[attr] = True
            i += 1
            continue
        if kind == "optional":
            if eq and not inline:
                return None
            values[attr] = inline if eq else OPTIONAL_ALONE
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(args) and args[i + 1] != "--":
            value = args[i + 1]
            i += 1
        else:
            return None
        if not value or value.startswith("="):
            return None  # `--x=` and `--x =v` are plumbum's to read (it takes the next argument, strips "=")
        if kind == "count":
            if not value.isdigit() or int(value) > max_count:
                return None
            values[attr] = int(value)
        elif kind == "list":
            values.setdefault(attr, []).append(value)
        else:
            values[attr] = value
        i += 1
    return values, []
