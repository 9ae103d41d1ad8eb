"""`gpudoc restore`: switches only; the work is in ``gpudoc.commands.restore``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class RestoreCommand(Command):
    """Put the profile and every bound file back as they were before gpudoc's first edit of the run's chain"""

    EXAMPLES = """
gpudoc restore --dry-run
gpudoc restore 20250131-140509123-a1b2c3
"""

    dry_run = cli.Flag("--dry-run", help="show what would be put back; write nothing")
    force = cli.Flag("--force", help="restore a file even when it was changed by hand since gpudoc's last edit")
    json = cli.Flag("--json", help="emit one JSON document")

    def main(self, run_id: str = "") -> int:  # plumbum converts by the annotation: a str, "" for none
        from gpudoc.commands.restore import restore

        return restore(self.workspace, run_id or None, dry_run=self.dry_run, force=self.force, as_json=self.json)
