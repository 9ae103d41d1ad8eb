"""The live command line as data: every (nested) subcommand, its switches and positionals.

What the CLI cannot say by itself -- that ``-p`` takes a profile name, that ``fix`` and ``logs``
take a run id, that ``run`` takes a command line -- lives in the small tables below.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")
SCRIPT_NAMES = {"bash": "gpudoc", "zsh": "_gpudoc", "fish": "gpudoc.fish"}
# Where pyproject's data-files put them under the install prefix.
INSTALLED_DIRS = {
    "bash": "share/bash-completion/completions",
    "zsh": "share/zsh/site-functions",
    "fish": "share/fish/vendor_completions.d",
}

# What a switch's value is, by any of its names (plumbum only knows the Python type).
SWITCH_VALUES: dict[str, str | None] = {
    "wait": None,  # --wait or --wait=SECONDS: never the next word (that is the command)
    "profile": "profiles",
    "snapshot": "files",
    "log": "files",
    "config": "files",
    "output": "files",
    "only": "checks",
    "skip": "checks",
    "python": "files",
}
# What positional arguments are, per command path; a trailing "*" repeats the last kind.
# "command" hands the rest of the line to the shell's own completion (gpudoc run -- COMMAND).
POSITIONALS = {
    ("run",): ("command",),
    ("fix",): ("runs*",),  # several runs of one job (one per node)
    ("logs",): ("runs",),
    ("restore",): ("runs",),
    ("completions",): ("shells",),
    ("profile", "show"): ("profiles",),
    ("profile", "new"): ("free",),
}
# By parameter name of main(), for commands not in POSITIONALS.
_PARAM_KINDS = {
    "run_id": "runs",
    "run": "runs",
    "shell": "shells",
    "profile": "profiles",
    "command": "command",
    "argv": "command",
    "file": "files",
    "path": "files",
    "log": "files",
}


@dataclass(frozen=True)
class Switch:
    names: tuple[str, ...]  # with their dashes: ("-p", "--profile")
    value: str | None  # None: a flag; else profiles|runs|files|dirs|checks|choice|free
    choices: tuple[str, ...] = ()
    help: str = ""
    repeat: bool = False
    csv: bool = False  # the value is a comma-separated list of choices (--only driver,env)
    argname: str = ""  # what --help calls the value: N, NAME, FILE

    @property
    def long_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n.startswith("--"))

    @property
    def short_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if not n.startswith("--"))


@dataclass
class Node:
    path: tuple[str, ...]
    summary: str
    switches: list[Switch]
    positionals: tuple[str, ...] = ()
    variadic: bool = False
    children: dict[str, Node] = field(default_factory=dict)

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children.values():
            yield from child.walk()

    @property
    def takes_command(self) -> bool:
        return "command" in self.positionals


def _one_line(text: str | None) -> str:
    text = inspect.cleandoc(text or "").strip()
    first = text.splitlines()[0] if text else ""
    return first.rstrip(".").strip()


def _check_ids() -> tuple[str, ...]:
    """Check groups and ids, for --only/--skip (fixed at generation time, like the switches)."""
    from gpudoc.checks import CATALOGUE

    groups = [getattr(check, "group", None) for check in CATALOGUE]
    ids = [getattr(check, "id", None) for check in CATALOGUE]
    return tuple(dict.fromkeys(str(x) for x in [*groups, *ids] if x))


def _switch(info: Any, checks: tuple[str, ...]) -> Switch:
    from plumbum import cli

    names = tuple(("-" if len(n) == 1 else "--") + n for n in info.names)
    value = None
    choices: tuple[str, ...] = ()
    csv = False
    if info.argtype is not None:
        hinted = [SWITCH_VALUES[n] for n in info.names if n in SWITCH_VALUES]
        if hinted:
            value = hinted[0]
        elif isinstance(info.argtype, cli.Set):
            value = "choice"
            choices = tuple(str(v) for v in info.argtype.values)
        elif info.argtype in (cli.ExistingFile, cli.NonexistentPath) or info.argtype is Path:
            value = "files"
        elif info.argtype is cli.ExistingDirectory:
            value = "dirs"
        else:
            value = "free"
        if value == "checks":
            value, choices, csv = ("choice", checks, True) if checks else ("free", (), False)
    argname = info.argname if info.argname and info.argname != "VALUE" else ""
    return Switch(names=names, value=value, choices=choices, help=_one_line(info.help),
                  repeat=bool(info.list), csv=csv, argname=argname)


def _positionals(path: tuple[str, ...], app_cls: Any) -> tuple[tuple[str, ...], bool]:
    if path in POSITIONALS:
        given = POSITIONALS[path]
        variadic = given[-1] == "command" or given[-1].endswith("*")
        return tuple(k.rstrip("*") for k in given), variadic
    try:
        params = list(inspect.signature(app_cls.main).parameters.values())[1:]
    except (TypeError, ValueError):
        return (), False
    kinds: list[str] = []
    variadic = False
    for param in params:
        kinds.append(_PARAM_KINDS.get(param.name, "free"))
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            variadic = True
    return tuple(kinds), variadic


def command_tree(app_cls: Any = None, prog: str = "gpudoc") -> Node:
    """The live command line as data: every (nested) subcommand and its switches."""
    if app_cls is None:
        from gpudoc.cli.app import Gpudoc as app_cls
    checks = _check_ids()
    return _node(app_cls, (), prog, checks)


def _node(app_cls: Any, path: tuple[str, ...], prog: str, checks: tuple[str, ...]) -> Node:
    inst = app_cls(" ".join((prog, *path)))
    seen: list = []
    for info in inst._switches_by_name.values():  # plumbum's only registry
        if info not in seen:
            seen.append(info)
    # The command's own switches first, plumbum's meta-switches (help, version) last.
    seen.sort(key=lambda info: info.group == "Meta-switches")
    switches = [_switch(info, checks) for info in seen]
    children = {}
    for name, sub in inst._subcommands.items():
        children[name] = _node(sub.get(), (*path, name), prog, checks)
    positionals, variadic = ((), False) if children else _positionals(path, app_cls)
    summary = _one_line(getattr(app_cls, "DESCRIPTION", None) or app_cls.__doc__)
    return Node(path=path, summary=summary, switches=switches, positionals=positionals,
                variadic=variadic, children=children)
