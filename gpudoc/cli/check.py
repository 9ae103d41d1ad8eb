"""`gpudoc check`: switches only; the work is in ``gpudoc.commands.check``.

`gpudoc check` runs before every launch and in scripts, so its start-up counts: its usual command
lines are parsed without importing plumbum (``gpudoc.commands.switches``, ~40 ms), and the plumbum
command (``CheckCommand``, built here from the same switch table) takes over for help, errors and
anything unusual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudoc.commands.switches import Switch, defaults, parse_switches

if TYPE_CHECKING:
    from gpudoc.workspace import Workspace

_DOC = "Pre-flight: is this machine ready for the training job, and if not, what exactly to do"

EXAMPLES = """
gpudoc check -p a10g-24gb --gpus 0-3
gpudoc check --snapshot nvidia-smi-q.xml --snapshot apps.csv --json
"""

SWITCHES: tuple[Switch, ...] = (
    (("-p", "--profile"), "profile", "str", "PROFILE", "profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)"),
    (("--json",), "json", None, "", "emit one JSON document (facts, findings, summary)"),
    (("--strict",), "strict", None, "", "exit 1 on warnings too"),
    (("--only",), "only", "list", "IDS",
     "run only these checks (comma-separated ids or groups: driver gpu proc env host)"),
    (("--skip",), "skip", "list", "IDS", "skip these checks (ids or groups)"),
    (("--gpus",), "gpus", "str", "LIST", "GPU indexes to check, e.g. 0,1 or 0-3 (default: the job's)"),
    (("--snapshot",), "snapshot", "list", "FILE", "read GPU facts from a saved nvidia-smi output or gpudoc --json"),
    (("--deep",), "deep", None, "", "also start the job's Python to probe torch (slow)"),
    (("--list-checks",), "list_checks", None, "", "list check ids and titles, then exit"),
    (("--python",), "python", "str", "PATH",
     "the job's interpreter (default: the one the profile's latest run ran, else python3 on PATH)"),
)


def fast_main(args: list[str], workspace: Workspace) -> int | None:
    """`gpudoc check ARGS` without plumbum; None: let the full parser handle these arguments."""
    parsed = parse_switches(args, SWITCHES)
    if parsed is None or parsed[1]:
        return None
    return _check({**defaults(SWITCHES), **parsed[0]}, workspace)


def _check(values: dict[str, Any], workspace: Workspace) -> int:
    from gpudoc.commands.check import check

    return check(
        workspace,
        profile_name=values["profile"],
        as_json=values["json"],
        strict=values["strict"],
        only=values["only"],
        skip=values["skip"],
        gpus=values["gpus"],
        snapshots=values["snapshot"],
        deep=values["deep"],
        list_checks=values["list_checks"],
        python=values["python"],
    )


def _build_command_class() -> type:
    from gpudoc.cli.base import Command, switch_attributes

    # plumbum converts positionals by main's annotations, `self` included: it stays unannotated.
    def main(self, *args: str) -> int:  # type: ignore[no-untyped-def]
        from gpudoc.errors import UsageError

        if args:
            raise UsageError(f"gpudoc check: unexpected argument '{args[0]}'")
        return _check({attr: getattr(self, attr) for _, attr, _, _, _ in SWITCHES}, self.workspace)

    attrs: dict[str, Any] = {"__doc__": _DOC, "__module__": __name__, "EXAMPLES": EXAMPLES, "main": main,
                             **switch_attributes(SWITCHES)}
    return type("CheckCommand", (Command,), attrs)


_cache: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    # `gpudoc.cli.app` names "gpudoc.cli.check.CheckCommand": built (and plumbum imported) on demand.
    if name == "CheckCommand":
        if name not in _cache:
            _cache[name] = _build_command_class()
        return _cache[name]
    raise AttributeError(name)
