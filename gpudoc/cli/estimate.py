"""`gpudoc estimate` (placeholder until its issue lands)."""

from __future__ import annotations

from gpudoc.cli.base import Command
from gpudoc.errors import GpudocError


class EstimateCommand(Command):
    """Not built yet."""

    def main(self, *args: str) -> int:
        raise GpudocError("gpudoc estimate: not built yet")
