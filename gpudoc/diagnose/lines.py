"""Log lines as they arrive from launchers, reduced to what the message itself says.

Launchers and loggers wrap every line: torchrun's ``[rank3]:`` / ``[default0]:``, ``srun -l``'s
``0: ``, ``mpirun --tag-output``'s ``[1,0]<stderr>:``, Ray's ``(Actor pid=1, ip=…)``, CI and
logging timestamps, terminal colours, and people pasting logs into issues add markdown. The rank in
such a prefix is kept (it says who failed first); the rest is noise for the signatures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][A-Z0-9]|[=>NOM78c])")
# Markdown people add when pasting a log into an issue: bold, code spans, quote markers.
_MARKDOWN = re.compile(r"\*\*|`+|^\s*>\s|^_+|_+$")

_TIMESTAMP = re.compile(
    r"""^(?:
        \d{4}-\d{2}-\d{2}[T\ ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?   # ISO / CI
      | \[\d{4}-\d{2}-\d{2}[T\ ][\d:.,]+\]                                              # [2024-…]
      | \[\d{2}/\d{2}/\d{2,4}\ [\d:.,]+\]                                               # [03/17/23 20:03:12]
      | \[\s*\d+\.\d+\]                                                                  # dmesg [441280.839852]
    )\s*""",
    re.VERBOSE,
)

# Each alternative captures the rank (or local rank) the line came from.
_RANK_PREFIX = re.compile(
    r"""^(?:
        \[(?:rank|Rank|RANK)\s?(?P<r1>\d+)\]\s?:?            # [rank3]:  torch >= 2.2 / log_line_prefix
      | \[(?P<role>[A-Za-z_][\w-]*?)(?P<r2>\d+)\]:           # [default0]:  torchrun --tee
      | \[\d+,(?P<r3>\d+)\]<std(?:out|err)>:                 # [1,0]<stderr>:  mpirun --tag-output
      | \s{0,4}(?P<r4>\d{1,5}):\s                           # 0:   srun --label
      | rank\s?(?P<r5>\d+):\s                                # rank 3:  some loggers
    )\s*""",
    re.VERBOSE,
)
_RAY_PREFIX = re.compile(r"^\((?:[\w.]+)\s+pid=\d+(?:,\s*ip=[\w.:-]+)?\)\s*")


@dataclass(frozen=True)
class Line:
    """One normalised line: ``text`` for the signatures, ``rank`` from its prefix (or None)."""

    number: int  # 0-based index in the log
    text: str
    rank: int | None
    raw: str


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def normalise(raw: str) -> tuple[str, int | None]:
    """(message text, rank from the prefix) of one raw line."""
    text = strip_ansi(raw).replace("\x00", "")
    rank: int | None = None
    # Prefixes nest (Ray around torch around timestamp), so peel until nothing changes.
    for _ in range(6):
        before = text
        text = text.lstrip(" \t\ufeff")
        text = _RAY_PREFIX.sub("", text, count=1)
        text = _TIMESTAMP.sub("", text, count=1)
        match = _RANK_PREFIX.match(text)
        if match:
            value = next(v for v in match.group("r1", "r2", "r3", "r4", "r5") if v is not None)
            if rank is None:
                rank = int(value)
            text = text[match.end():]
        if text == before:
            break
    if "*" in text or "`" in text or "_" in text or text.startswith(">"):
        text = _MARKDOWN.sub("", text)
    return text.strip(), rank


def split_lines(text: str) -> list[str]:
    """Lines, treating a bare carriage return (progress bars) as a line end too."""
    return text.splitlines()


def iter_lines(text: str) -> list[Line]:
    out = []
    for number, raw in enumerate(split_lines(text)):
        body, rank = normalise(raw)
        out.append(Line(number, body, rank, raw))
    return out
