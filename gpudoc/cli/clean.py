"""`gpudoc clean`: switches only; the work is in ``gpudoc.commands.clean``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class CleanCommand(Command):
    """End your stray processes holding GPU memory (SIGTERM, then SIGKILL), then report what was freed"""

    EXAMPLES = """
gpudoc clean --gpus 0,1 --dry-run
gpudoc clean --gpus 0 --yes
"""

    gpus = cli.SwitchAttr("--gpus", str, argname="LIST", help="GPU indexes to clear, e.g. 0,1 or 0-3 (default: all)")
    yes = cli.Flag(["-y", "--yes"], help="do not ask for confirmation")
    dry_run = cli.Flag("--dry-run", help="show what would be ended; signal nothing")
    json = cli.Flag("--json", help="emit one JSON document")

    def main(self, *args: str) -> int:
        from gpudoc.errors import UsageError

        if args:
            raise UsageError(f"gpudoc clean: unexpected argument '{args[0]}'")
        from gpudoc.commands.clean import clean

        return clean(self.workspace, gpus=self.gpus, yes=self.yes, dry_run=self.dry_run, as_json=self.json)
