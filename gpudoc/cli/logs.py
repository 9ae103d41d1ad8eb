"""`gpudoc logs`: switches only; the work is in ``gpudoc.commands.logs``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class LogsCommand(Command):
    """Print a run's output (the latest run by default); -f follows it until the run ends."""

    EXAMPLES = """
gpudoc logs -f
gpudoc logs 20250131-140509123-a1b2c3 | grep loss
gpudoc logs --rank 1
"""

    follow = cli.Flag(["-f", "--follow"], help="keep printing new output until the run ends")
    rank = cli.SwitchAttr("--rank", cli.Range(0, 1 << 20), argname="N", default=None,
                          help="one local rank's own output, from torchrun's --log-dir files")

    def main(self, run_id: str = "") -> int:  # plumbum converts by the annotation: a str, "" for none
        from gpudoc.commands.logs import logs, rank_log

        if self.rank is not None:
            return rank_log(self.workspace, run_id or None, self.rank)
        return logs(self.workspace, run_id or None, follow=self.follow)
