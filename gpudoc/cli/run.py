"""`gpudoc run`: switches only; the work is in ``gpudoc.commands.run``.

`gpudoc run` is on the launch path of every job, so its start-up counts: the plain parser of
``gpudoc.commands.run_options`` handles the common invocations without importing plumbum (~70 ms),
and the plumbum command (``RunCommand``, built here from the same switch table) takes over for
help, errors and anything unusual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudoc.commands.run_options import MAX_RETRIES, SWITCHES, RunOptions, parse_fast, split_command, takes_value
from gpudoc.commands.switches import spelled_out
from gpudoc.errors import ExitStatus, UsageError

if TYPE_CHECKING:
    from gpudoc.workspace import Workspace

_DOC = "Launch a training job: checks first, the profile applied, a complete log, a run record."

EXAMPLES = """
gpudoc run -p a10g-24gb -- torchrun --nproc_per_node=4 train.py --config cfg.yaml
gpudoc run --retry-oom 3 --tmux train -- python train.py
"""


def fast_main(args: list[str], workspace: Workspace) -> int | None:
    """`gpudoc run ARGS` without plumbum; None: let the full parser handle these arguments."""
    options = parse_fast(args)
    if options is None or not options.command:
        return None
    return _run(options, workspace)


def _run(options: RunOptions, workspace: Workspace) -> int:
    from gpudoc.commands.run import run

    return run(options, workspace)


def _build_command_class() -> type:
    from gpudoc.cli.base import Command, switch_attributes

    def _parse_args(self: Any, argv: list[str]) -> Any:
        try:
            return Command._parse_args(self, spelled_out(split_command(argv, takes_value()), SWITCHES))
        except UsageError as exc:
            # 125, like `docker run`: gpudoc's own failures never look like the job's status.
            exc.exit_status = ExitStatus.LAUNCH_REFUSED
            raise

    # plumbum converts positionals by main's annotations, `self` included: it stays unannotated.
    def main(self, *command: str) -> int:  # type: ignore[no-untyped-def]
        values = {attr: getattr(self, attr) for _, attr, _, _, _ in SWITCHES}
        return _run(RunOptions(command=list(command), **values), self.workspace)

    attrs: dict[str, Any] = {
        "__doc__": _DOC, "__module__": __name__, "PROGNAME": "gpudoc run",
        "USAGE": "    gpudoc run [SWITCHES] -- COMMAND [ARGS...]\n", "EXAMPLES": EXAMPLES,
        "_parse_args": _parse_args, "main": main, **switch_attributes(SWITCHES, max_count=MAX_RETRIES),
    }
    return type("RunCommand", (Command,), attrs)


_cache: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    # `gpudoc.cli.app` names "gpudoc.cli.run.RunCommand": built (and plumbum imported) on demand.
    if name == "RunCommand":
        if name not in _cache:
            _cache[name] = _build_command_class()
        return _cache[name]
    raise AttributeError(name)
