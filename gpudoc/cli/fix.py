"""`gpudoc fix` (placeholder until its issue lands)."""

from __future__ import annotations

from gpudoc.cli.base import Command
from gpudoc.errors import GpudocError


class FixCommand(Command):
    """Not built yet."""

    def main(self, *args: str) -> int:
        raise GpudocError("gpudoc fix: not built yet")
