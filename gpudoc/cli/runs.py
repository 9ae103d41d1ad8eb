"""`gpudoc runs`: switches only; the work is in ``gpudoc.commands.runs``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class RunsCommand(Command):
    """List the run records: id, start, duration, status, cause, peak memory, what changed and command."""

    EXAMPLES = """
gpudoc runs
gpudoc runs --json --last 5
gpudoc runs prune --keep 200
gpudoc runs diff 20250131-140509123-a1b2c3 20250131-151002456-d4e5f6
gpudoc runs show
"""

    json = cli.Flag("--json", help="emit one JSON document with every record")
    last = cli.SwitchAttr("--last", cli.Range(1, 100000), argname="N", default=None, help="only the N most recent runs")
    every = cli.Flag("--all", help="every project's runs (those gpudoc has run in), one table each")

    def main(self, *args: str) -> int:
        from gpudoc.errors import UsageError

        if self.nested_command:
            return 0  # `gpudoc runs prune`: the subcommand does the work
        if args:
            import re

            from gpudoc.cli.main import GROUP_SUBCOMMANDS
            from gpudoc.profiles.validate import did_you_mean

            hint = (" (one run: `gpudoc runs show RUN_ID`; its log: `gpudoc logs RUN_ID`)"
                    if re.match(r"\d{8}-", args[0]) else did_you_mean(args[0], GROUP_SUBCOMMANDS["runs"]))
            raise UsageError(f"gpudoc runs: unexpected argument '{args[0]}'{hint}")
        from gpudoc.commands.runs import all_runs, runs

        if self.every:
            return all_runs(self.workspace, as_json=self.json, limit=self.last)
        return runs(self.workspace, as_json=self.json, limit=self.last)


@RunsCommand.subcommand("prune")
class RunsPruneCommand(Command):
    """Remove the oldest run records, beyond the newest N or older than DAYS.

    A run still going, and the runs of its retry chain, are kept whatever their age."""

    EXAMPLES = """
gpudoc runs prune --keep 200
gpudoc runs prune --older-than 30 --dry-run
"""

    keep = cli.SwitchAttr("--keep", cli.Range(1, 10**6), argname="N", default=None, help="keep the newest N runs")
    older_than = cli.SwitchAttr("--older-than", float, argname="DAYS", default=None,
                                help="remove runs started more than DAYS ago")
    dry_run = cli.Flag("--dry-run", help="say what would be removed, remove nothing")
    json = cli.Flag("--json", help="emit one JSON document")

    def main(self) -> int:
        import math

        from gpudoc.commands.runs import prune
        from gpudoc.errors import UsageError

        days = self.older_than
        if days is not None and not (math.isfinite(days) and 0 <= days <= 36500):
            raise UsageError(f"gpudoc runs prune: --older-than {days:g}: expected 0 to 36500 days")
        return prune(self.workspace, keep=self.keep, older_than_days=days, dry_run=self.dry_run, as_json=self.json)


@RunsCommand.subcommand("diff")
class RunsDiffCommand(Command):
    """Show what changed between two runs: knobs, environment, file edits, outcome."""

    EXAMPLES = """
gpudoc runs diff 20250131-140509123-a1b2c3 20250131-151002456-d4e5f6
gpudoc runs diff 20250131-1405 20250131-1510 --json
"""

    json = cli.Flag("--json", help="emit one JSON document")

    def main(self, a: str, b: str) -> int:
        from gpudoc.commands.runs import diff

        return diff(self.workspace, a, b, as_json=self.json)


@RunsCommand.subcommand("show")
class RunsShowCommand(Command):
    """Show one run: command, knobs, environment, edits, diagnosis, and memory over time per GPU."""

    EXAMPLES = """
gpudoc runs show
gpudoc runs show 20250131-140509123-a1b2c3 --json
gpudoc runs show --plot memory.png
"""

    json = cli.Flag("--json", help="emit one JSON document (the record and the timeline)")
    plot = cli.SwitchAttr("--plot", str, argname="FILE", default=None,
                          help="also draw the chart into FILE (.png or .svg; needs gpudoc[plot])")

    def main(self, run_id: str = "") -> int:  # plumbum converts by the annotation: a str, "" for none
        from pathlib import Path

        from gpudoc.commands.runs import show_run

        plot = Path(self.workspace.cwd) / self.plot if self.plot is not None else None
        return show_run(self.workspace, run_id or None, as_json=self.json, plot=plot)
