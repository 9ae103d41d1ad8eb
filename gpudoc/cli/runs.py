"""`gpudoc runs`: switches only; the work is in ``gpudoc.commands.runs``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class RunsCommand(Command):
    """List the run records: id, start, duration, status, cause and command."""

    EXAMPLES = """
gpudoc runs
gpudoc runs --json --last 5
"""

    json = cli.Flag("--json", help="emit one JSON document with every record")
    last = cli.SwitchAttr("--last", cli.Range(1, 100000), argname="N", default=None, help="only the N most recent runs")

    def main(self, *args: str) -> int:
        from gpudoc.errors import UsageError

        if args:
            raise UsageError(f"gpudoc runs: unexpected argument '{args[0]}' (see `gpudoc logs RUN_ID`)")
        from gpudoc.commands.runs import runs

        return runs(self.workspace, as_json=self.json, limit=self.last)
