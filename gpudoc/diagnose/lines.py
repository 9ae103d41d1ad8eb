"""Log lines as they arrive from launchers, reduced to what the message itself says.

Launchers and loggers wrap every line: torchrun's ``[rank3]:`` / ``[default0]:``, ``srun -l``'s
``0: ``, ``mpirun --tag-output``'s ``[1,0]<stderr>:``, Ray's ``(Actor pid=1, ip=…)``, CI and
logging timestamps, terminal colours, and people pasting logs into issues add markdown. The rank in
such a prefix is kept (it says who failed first); the rest is noise for the signatures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
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
    )""",
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
    )""",
    re.VERBOSE,
)
_RAY_PREFIX = re.compile(r"^\((?:[\w.]+)\s+pid=\d+(?:,\s*ip=[\w.:-]+)?\)")


# Traceback structure: a Python frame header, a frame of a C++ backtrace (c10 prints them under
# "Exception raised from …"), or a line inside the box rich draws around a traceback (source
# and locals; the exception itself is printed below the box). They quote code and variables,
# never what went wrong.
_FRAME = re.compile(r'^(?:File "[^"\n]*", line \d+|frame #\d+:|[│╭╰])')
# Python statements that only ever appear as source code (a traceback line that lost its
# indentation, or a log that quotes code): an exception message is "Name: text", never these.
# "raise" must be followed by something that reads as an expression, because "raise your shared
# memory limit" is part of a real message.
_CODE = re.compile(
    r"^(?:raise(?:\s+[A-Za-z_][\w.]*(?:\s*\(|\s+from\b|\s*$)|\s*$)"
    r"|except(?:\s+[\w.,\s()]+?(?:\s+as\s+\w+)?)?\s*:\s*(?:#.*)?$)"
)

MESSAGE, FRAME, SOURCE = "message", "frame", "source"


@dataclass(frozen=True)
class Line:
    """One normalised line: ``text`` for the signatures, ``rank`` from its prefix (or None).

    ``kind`` says whether the line is something a program printed about itself (``message``) or
    traceback structure: a frame header (``frame``) or a line of source code shown under one
    (``source``). Only messages are evidence: a traceback's ``raise OutOfMemoryError(...)`` line
    carries no figures, or the wrong ones.
    """

    number: int  # 0-based index in the log
    text: str
    rank: int | None
    raw: str
    indent: int = 0  # whitespace between the launcher prefix and the text
    kind: str = MESSAGE

    @property
    def is_message(self) -> bool:
        return self.kind == MESSAGE


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def split_prefix(raw: str) -> tuple[str, int | None, int]:
    """(message text, rank from the prefix, indentation of the text after the prefix)."""
    text = strip_ansi(raw).replace("\x00", "")
    rank: int | None = None
    indent = 0
    # Prefixes nest (Ray around torch around timestamp), so peel one at a time until none is
    # left. The prefixes leave the whitespace after them in place: measured on the last round,
    # it is the line's own indentation, which tells traceback source lines from messages.
    for _ in range(10):
        body = text.lstrip(" \t\ufeff")
        indent = len(text) - len(body)
        text = body
        match = _RAY_PREFIX.match(text) or _TIMESTAMP.match(text)
        if match is None:
            match = _RANK_PREFIX.match(text)
            if match is None:
                break
            value = next(v for v in match.group("r1", "r2", "r3", "r4", "r5") if v is not None)
            if rank is None:
                rank = int(value)
        if not match.end():
            break
        text = text[match.end():]
    if "*" in text or "`" in text or "_" in text or text.startswith(">"):
        text = _MARKDOWN.sub("", text)
    return text.strip(), rank, indent


def normalise(raw: str) -> tuple[str, int | None]:
    """(message text, rank from the prefix) of one raw line."""
    text, rank, _indent = split_prefix(raw)
    return text, rank


class TracebackTracker:
    """Classifies lines in order as message, frame header or source code.

    Python prints each frame as ``File "…", line N`` and, indented deeper, the source line (and,
    from 3.11, a line of carets); the exception line that follows is back at the frame's margin
    or left of it. Ranks interleave their output, so the state is kept per rank. Where the
    indentation was lost (pasted logs), only statements that cannot be messages (``raise X(``)
    count as code.
    """

    def __init__(self, max_ranks: int = 4096) -> None:
        self._frame_indent: dict[int | None, int] = {}
        self._max_ranks = max_ranks

    def reset(self) -> None:
        self._frame_indent.clear()

    def kind(self, text: str, rank: int | None, indent: int) -> str:
        if _FRAME.match(text):
            if len(self._frame_indent) >= self._max_ranks:
                self._frame_indent.clear()
            self._frame_indent[rank] = indent
            return FRAME
        margin = self._frame_indent.get(rank)
        if margin is not None:
            if text and indent > margin:
                return SOURCE
            del self._frame_indent[rank]
        return SOURCE if _CODE.match(text) else MESSAGE


def split_lines(text: str) -> list[str]:
    """Lines, treating a bare carriage return (progress bars) as a line end too."""
    return text.splitlines()


def iter_lines(text: str) -> list[Line]:
    raws = split_lines(text)
    return lines_at(raws, range(len(raws)))


def lines_at(raws: Sequence[str], numbers: Iterable[int]) -> list[Line]:
    """The lines ``numbers`` (ascending) of ``raws``, numbered as in the whole log; the
    traceback state starts afresh after each gap."""
    out = []
    tracker = TracebackTracker()
    previous = -1
    for number in numbers:
        if number != previous + 1:
            tracker.reset()
        previous = number
        raw = raws[number]
        body, rank, indent = split_prefix(raw)
        out.append(Line(number, body, rank, raw, indent, tracker.kind(body, rank, indent)))
    return out


def is_log_text(text: str) -> bool:
    """Whether ``text`` (a log's tail, decoded with replacement) holds lines a log could have.

    Empty or blank, NUL bytes (``/dev/zero``, a core file), or mostly bytes that are no UTF-8
    text (a checkpoint, an image) is "nothing recognisable", never "no failure".
    """
    if not text.strip() or "\x00" in text:
        return False
    sample = text[-65536:]
    junk = sum(1 for ch in sample if ch == "\ufffd" or (ch < " " and ch not in "\t\r\n\x1b\x08\x0c"))
    return junk <= len(sample) // 10
