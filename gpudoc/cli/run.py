"""`gpudoc run`: switches only; the work is in ``gpudoc.commands.run``.

`gpudoc run` is on the launch path of every job, so its start-up counts: the plain parser here
handles the common invocations without importing plumbum (~70 ms), and the plumbum command
(``RunCommand``, built from the same switch table) takes over for help, errors and anything
unusual. One table, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from gpudoc.errors import ExitStatus, UsageError

_DOC = "Launch a training job: checks first, the profile applied, a complete log, a run record."

# (names, attribute, value kind: None = flag | "str" | "count", argname, help)
SWITCHES: tuple[tuple[tuple[str, ...], str, str | None, str, str], ...] = (
    (("-p", "--profile"), "profile", "str", "VALUE",
     "Profile name or path (default: ./gpudoc.toml or $GPUDOC_PROFILE)"),
    (("--no-check",), "no_check", None, "", "Skip the pre-flight checks"),
    (("--force",), "force", None, "", "Launch even when a pre-flight check fails"),
    (("--clean",), "clean", None, "", "First end this user's stray processes holding memory on the job's GPUs"),
    (("--yes", "-y"), "yes", None, "", "Do not ask before ending processes (--clean)"),
    (("--retry-oom",), "retry_oom", "count", "N",
     "After a GPU OOM, apply the next ladder rung and relaunch, up to N times"),
    (("--allow-semantic",), "allow_semantic", None, "",
     "Let --retry-oom use rungs that change the experiment (shorter sequences, ...)"),
    (("--tmux",), "tmux", "str", "NAME", "Start this run in a new detached tmux session NAME and print how to attach"),
    (("--dry-run",), "dry_run", None, "", "Show the command, environment and file edits; launch nothing"),
    (("--json",), "json", None, "", "With --dry-run: one JSON object; otherwise the final record as JSON on stderr"),
)
MAX_RETRIES = 1000

EXAMPLES = """
gpudoc run -p a10g-24gb -- torchrun --nproc_per_node=4 train.py --config cfg.yaml
gpudoc run --retry-oom 3 --tmux train -- python train.py
"""


def split_command(argv: list[str], takes_value: dict[str, bool]) -> list[str]:
    """Insert ``--`` before the first argument that is not a switch of ours (or a switch's value).

    The job's own flags must never be read as ours: `gpudoc run python train.py --lr 3` means
    `gpudoc run -- python train.py --lr 3`. ``takes_value`` maps a switch name without dashes
    to whether it takes a value.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, _ = arg[2:].partition("=")
            out.append(arg)
            if takes_value.get(name) and not eq and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            out.append(arg)
            if takes_value.get(arg[1]) and len(arg) == 2 and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        else:
            return out + ["--"] + argv[i:]
        i += 1
    return out


def _takes_value() -> dict[str, bool]:
    return {name.lstrip("-"): kind is not None for names, _, kind, _, _ in SWITCHES for name in names}


def parse_fast(args: list[str]) -> dict[str, Any] | None:
    """Our switches and the command, or None for anything the full parser should handle
    (help, version, an unknown switch, a bad value, a repeated switch)."""
    by_name = {name: (attr, kind) for names, attr, kind, _, _ in SWITCHES for name in names}
    values: dict[str, Any] = {attr: (None if kind == "str" else 0 if kind == "count" else False)
                              for _, attr, kind, _, _ in SWITCHES}
    seen: set[str] = set()
    argv = split_command(list(args), _takes_value())
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            values["command"] = argv[i + 1:]
            return values
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg[:2], "", arg[2:])
        if arg.startswith("-") and not arg.startswith("--") and inline:
            eq = "="
        if name not in by_name:
            return None
        attr, kind = by_name[name]
        if attr in seen:
            return None
        seen.add(attr)
        if kind is None:
            if eq:
                return None
            values[attr] = True
        else:
            if eq:
                value = inline
            elif i + 1 < len(argv) and argv[i + 1] != "--":
                value = argv[i + 1]
                i += 1
            else:
                return None
            if kind == "count":
                if not value.isdigit() or int(value) > MAX_RETRIES:
                    return None
                values[attr] = int(value)
            else:
                values[attr] = value
        i += 1
    values["command"] = []
    return values


def fast_main(args: list[str]) -> int | None:
    """`gpudoc run ARGS` without plumbum; None: let the full parser handle these arguments."""
    values = parse_fast(args)
    if values is None or not values["command"]:
        return None
    return _run(values)


def _run(values: dict[str, Any]) -> int:
    from gpudoc.commands.run import RunOptions, run

    return run(RunOptions(**values))


def _build_command_class():
    from plumbum import cli

    from gpudoc.cli.base import Command

    def _parse_args(self, argv):  # noqa: D401 - plumbum hook
        try:
            return Command._parse_args(self, split_command(argv, _takes_value()))
        except UsageError as exc:
            # 125, like `docker run`: gpudoc's own failures never look like the job's status.
            exc.exit_status = ExitStatus.LAUNCH_REFUSED
            raise

    def main(self, *command: str) -> int:
        values = {attr: getattr(self, attr) for _, attr, _, _, _ in SWITCHES}
        values["command"] = list(command)
        return _run(values)

    attrs: dict[str, Any] = {
        "__doc__": _DOC, "__module__": __name__, "PROGNAME": "gpudoc run",
        "USAGE": "    gpudoc run [SWITCHES] -- COMMAND [ARGS...]\n", "EXAMPLES": EXAMPLES,
        "_parse_args": _parse_args, "main": main,
    }
    for names, attr, kind, argname, help_text in SWITCHES:
        if kind is None:
            attrs[attr] = cli.Flag(list(names), help=help_text)
        elif kind == "count":
            attrs[attr] = cli.SwitchAttr(list(names), cli.Range(0, MAX_RETRIES), default=0, argname=argname,
                                         help=help_text)
        else:
            attrs[attr] = cli.SwitchAttr(list(names), str, default=None, argname=argname, help=help_text)
    return type("RunCommand", (Command,), attrs)


_cache: dict[str, Any] = {}


def __getattr__(name: str):
    # `gpudoc.cli.app` names "gpudoc.cli.run.RunCommand": built (and plumbum imported) on demand.
    if name == "RunCommand":
        if name not in _cache:
            _cache[name] = _build_command_class()
        return _cache[name]
    raise AttributeError(name)
