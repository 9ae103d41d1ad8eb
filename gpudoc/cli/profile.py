"""`gpudoc profile` (placeholder until its issue lands)."""

from __future__ import annotations

from gpudoc.cli.base import Command
from gpudoc.errors import GpudocError


class ProfileCommand(Command):
    """Not built yet."""

    def main(self, *args: str) -> int:
        raise GpudocError("gpudoc profile: not built yet")
