"""`gpudoc logs`: switches only; the work is in ``gpudoc.commands.logs``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class LogsCommand(Command):
    """Print a run's output (the latest run by default); -f follows it until the run ends."""

    EXAMPLES = """
gpudoc logs -f
gpudoc logs 20250131-140509123-a1b2c3 | grep loss
"""

    follow = cli.Flag(["-f", "--follow"], help="keep printing new output until the run ends")

    def main(self, run_id: str = "") -> int:  # plumbum converts by the annotation: a str, "" for none
        from gpudoc.commands.logs import logs

        return logs(self.workspace, run_id or None, follow=self.follow)
