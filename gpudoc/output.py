"""The one seam every command prints through: streams, colour and width, injectable in tests."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TextIO

_COLOURS = {
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "dim": "2",
    "bold": "1",
}


def printable(text: str) -> str:
    """Text that came from outside (a record, a switch's value), safe to print to a terminal:
    control characters (an escape sequence hidden in a recorded command, a carriage return that
    would overwrite the line) are shown as escapes, never sent."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def _wants_colour(stream: TextIO) -> bool:
    # https://no-color.org: any non-empty NO_COLOR disables colour; FORCE_COLOR forces it.
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass
class Console:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    colour: bool | None = None

    def __post_init__(self) -> None:
        if self.colour is None:
            self.colour = _wants_colour(self.out)

    def style(self, text: str, *styles: str) -> str:
        if not self.colour or not styles:
            return text
        codes = ";".join(_COLOURS[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def flush(self) -> None:
        self.out.flush()

