"""Shared plumbum base: usage errors go to our one error boundary instead of a help dump."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpudoc.cli.lazy import defer_unused_imports

defer_unused_imports()  # before plumbum: see gpudoc.cli.lazy

from plumbum import cli  # noqa: E402 - after the deferral above, on purpose
from plumbum.cli.application import ShowCompletion, ShowHelp, ShowHelpAll, ShowVersion  # noqa: E402

from gpudoc.cli import context  # noqa: E402
from gpudoc.errors import UsageError  # noqa: E402
from gpudoc.workspace import Workspace  # noqa: E402

if TYPE_CHECKING:
    from gpudoc.commands.switches import Switch

_META = (ShowHelp, ShowHelpAll, ShowVersion, ShowCompletion)


class Command(cli.Application):
    """Base for every gpudoc (sub)command.

    plumbum prints the whole help page to stdout on a bad switch; a user (or a script reading our
    JSON) is better served by one line on stderr and exit 2, which ``gpudoc.cli.main`` provides.
    """

    ALLOW_ABBREV = False
    SUBCOMMAND_HELPMSG = False
    EXAMPLES = ""  # shown at the end of --help: two real invocations

    def __init__(self, executable: Any) -> None:
        super().__init__(executable)
        # Our -h/--help below replaces plumbum's; without this the replaced one is still listed
        # in --help as a nameless line ("Prints this help message and quits").
        self._switches_by_func = {
            func: info for func, info in self._switches_by_func.items()
            if any(self._switches_by_name.get(name) is info for name in info.names)
        }

    def _parse_args(self, argv: list[str]) -> Any:  # plumbum hook (tests/cli/test_base.py pins it)
        try:
            return super()._parse_args(argv)
        except cli.SwitchError as exc:
            if isinstance(exc, _META):
                raise
            raise UsageError(f"{self.PROGNAME}: {_one_line(exc)}") from None

    def _validate_args(self, swfuncs: Any, tailargs: Any) -> Any:
        try:
            return super()._validate_args(swfuncs, tailargs)
        except cli.SwitchError as exc:
            if isinstance(exc, _META):
                raise
            raise UsageError(f"{self.PROGNAME}: {_one_line(exc)}") from None

    @property
    def workspace(self) -> Workspace:
        """The one workspace of this invocation (built in ``gpudoc.cli.main``)."""
        return context.current()

    @cli.switch(["-h", "--help"], overridable=True, group="Meta-switches")
    def help(self) -> None:
        """Prints this help message and quits"""
        if not self.USAGE:
            self.USAGE = usage_line(self.main, subcommands=bool(self._subcommands))
        super().help()
        if self.EXAMPLES:
            print("Examples:")
            for line in self.EXAMPLES.strip("\n").splitlines():
                print(f"    {line}")
            print()


def usage_line(main: Any, *, subcommands: bool) -> str:
    """The usage line as the README writes it (``gpudoc logs [SWITCHES] [RUN_ID]``): plumbum's own
    spells an optional argument with its default, ``[run_id=]``, which reads like a switch to fill in."""
    import inspect

    spec = inspect.getfullargspec(main)
    names = [name.upper() for name in spec.args[1:]]  # skip self
    for i in range(len(spec.defaults or ())):
        names[-i - 1] = f"[{names[-i - 1]}]"
    if spec.varargs:
        names.append(f"[{spec.varargs.upper()}...]")
    words = ["{progname}", "[SWITCHES]", *(["[SUBCOMMAND [SWITCHES]]"] if subcommands else []), *names]
    return "    " + " ".join(words) + "\n"


# plumbum's built-in `--completions {bash,fish}` prints a generic script that knows only the
# top-level switches; `gpudoc completions bash|zsh|fish` prints the real one (completions/).
Command.unbind_switches("completions")


def switch_attributes(switches: tuple[Switch, ...], *, max_count: int = 0) -> dict[str, Any]:
    """The plumbum switch attributes of a plain switch table (``gpudoc.commands.switches``), for
    the command class built from it."""
    attrs: dict[str, Any] = {}
    for names, attr, kind, argname, help_text in switches:
        if kind is None:
            attrs[attr] = cli.Flag(list(names), help=help_text)
        elif kind == "count":
            attrs[attr] = cli.SwitchAttr(list(names), cli.Range(0, max_count), default=0, argname=argname,
                                         help=help_text)
        else:
            attrs[attr] = cli.SwitchAttr(list(names), str, list=kind == "list", argname=argname, help=help_text)
    return attrs


_TYPE_WORDS = {"<class 'float'>": "a number", "<class 'int'>": "an integer", "<class 'str'>": "a string"}


def _one_line(exc: Exception) -> str:
    """plumbum's switch errors in one line, in words: "--retry-oom: expected [0..1000], not '-3'"."""
    first = str(exc).strip().splitlines()[0].rstrip(":") if str(exc).strip() else type(exc).__name__
    for kind, words in _TYPE_WORDS.items():
        first = first.replace(kind, words)
    return re.sub(r"^Argument of ([\w-]+) expected to be", lambda m: f"--{m.group(1)}: expected", first)
