"""`gpudoc check`: switches only; the work is in ``gpudoc.commands.check``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class CheckCommand(Command):
    """Pre-flight: is this machine ready for the training job, and if not, what exactly to do"""

    EXAMPLES = """
gpudoc check -p a10g-24gb --gpus 0-3
gpudoc check --snapshot nvidia-smi-q.xml --snapshot apps.csv --json
"""

    profile = cli.SwitchAttr(["-p", "--profile"], str, argname="PROFILE",
                             help="profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)")
    json = cli.Flag("--json", help="emit one JSON document (facts, findings, summary)")
    strict = cli.Flag("--strict", help="exit 1 on warnings too")
    only = cli.SwitchAttr("--only", str, list=True, argname="IDS",
                          help="run only these checks (comma-separated ids or groups: driver gpu proc env host)")
    skip = cli.SwitchAttr("--skip", str, list=True, argname="IDS", help="skip these checks (ids or groups)")
    gpus = cli.SwitchAttr("--gpus", str, argname="LIST", help="GPU indexes to check, e.g. 0,1 or 0-3 (default: the job's)")
    snapshot = cli.SwitchAttr("--snapshot", str, list=True, argname="FILE",
                              help="read GPU facts from a saved nvidia-smi output or gpudoc --json")
    deep = cli.Flag("--deep", help="also start the job's Python to probe torch (slow)")
    list_checks = cli.Flag("--list-checks", help="list check ids and titles, then exit")
    python = cli.SwitchAttr("--python", str, argname="PATH", help="the job's interpreter (default: python3 on PATH)")

    def main(self, *args: str) -> int:
        from gpudoc.errors import UsageError

        if args:
            raise UsageError(f"gpudoc check: unexpected argument '{args[0]}'")
        from gpudoc.commands.check import check

        return check(
            self.workspace,
            profile_name=self.profile,
            as_json=self.json,
            strict=self.strict,
            only=self.only,
            skip=self.skip,
            gpus=self.gpus,
            snapshots=self.snapshot,
            deep=self.deep,
            list_checks=self.list_checks,
            python=self.python,
        )
