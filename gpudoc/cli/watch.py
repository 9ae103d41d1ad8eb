"""`gpudoc watch`: switches only; the work is in ``gpudoc.commands.watch``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class WatchCommand(Command):
    """Follow a running run (the latest by default): GPU memory with its history, processes, last line."""

    EXAMPLES = """
gpudoc watch
gpudoc watch 20250131-140509123-a1b2c3 --interval 2
"""

    interval = cli.SwitchAttr("--interval", cli.Range(1, 3600), argname="SECONDS", default=1,
                              help="seconds between frames")

    def main(self, run_id: str = "") -> int:  # plumbum converts by the annotation: a str, "" for none
        from gpudoc.commands.watch import watch

        return watch(self.workspace, run_id or None, interval_s=float(self.interval))
