"""The substring gate: which lines of a big log can be evidence at all, found in one pass.

Every signature needs a line that ``signatures.PREFILTER`` accepts, and every line that regex
accepts contains one of ``KEYWORDS`` once case-folded (tests/diagnose/test_gate.py holds that
against lines hypothesis builds from the regex itself). So a big log is read as its candidate
lines with a little context around each (a traceback frame before, a wrapped message or
torchrun's summary block after) instead of line by line through the regexes: the same answer
at a fraction of the cost, since training output is mostly lines with none of these words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

# Case-folded substrings, one at least in every line PREFILTER matches.
# Case-folded substrings, one at least in every line PREFILTER matches (fewer is faster: each is
# one pass over the log; "memory" stands for "out of memory", "OutOfMemory", "shared memory",
# "not enough memory"; "fail" for "failure", "failed", "failed to recv").
KEYWORDS = (
    "memory", "oom", "resource", "alloc", "not_initialized", "killed", "sig", "/dev/shm",  # noqa: S108 - a word to look for, not a path
    "/torch_", "watchdog", "timeout", "timed out", "nccl", "exit", "cancelled", "keyboardinterrupt",
    "terminat", "error", "exception", "fail", "segmentation fault", "illegal instruction", "peer",
    "remote process", "gloo", "in-use chunks",
    # and in every line markers.MARKER matches, or that opens a traceback:
    "fatal", "critical", "panic", "assert", "traceback",
)
# Letters re.IGNORECASE equates with ASCII ones that casefold() leaves alone.
_ODD_CASES = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})

CONTEXT_BEFORE = 8  # a frame header above a quoted source line; a torchrun entry's first lines
CONTEXT_AFTER = 24  # a wrapped message, interleaved ranks, the Root Cause block


def fold(text: str) -> str:
    if text.isascii():
        return text.lower()  # the usual log: the same, without the Unicode tables
    return text.translate(_ODD_CASES).casefold()


# Line ends str.splitlines() knows besides "\n" (in ASCII text): where any is present, the text is
# split and joined again before folding, so that line numbers agree with splitlines().
_OTHER_LINE_ENDS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def split_with_candidates(text: str) -> tuple[list[str], list[int]]:
    """``text.splitlines()`` and the indexes of the lines that hold a keyword."""
    if text.isascii() and not any(end in text for end in _OTHER_LINE_ENDS):  # memchr each: faster than a class
        # The usual log: fold the text as it is, no second copy of it joined from its lines.
        lines = text.split("\n")
        if lines and not lines[-1]:
            lines.pop()
        return lines, _hits(text.lower())
    lines = text.splitlines()
    return lines, candidate_lines(lines)


def candidate_lines(lines: Sequence[str]) -> list[int]:
    """Indexes of the lines that hold a keyword, in order."""
    return _hits(fold("\n".join(lines)))  # folding may change lengths: positions are the folded text's


def _hits(folded: str) -> list[int]:
    positions = []
    for word in KEYWORDS:
        pos = folded.find(word)
        while pos != -1:
            positions.append(pos)
            end = folded.find("\n", pos)  # one hit per line is enough
            pos = folded.find(word, end + 1) if end != -1 else -1
    positions.sort()
    hits: list[int] = []
    line = last = 0
    for pos in positions:
        line += folded.count("\n", last, pos)
        last = pos
        if not hits or hits[-1] != line:
            hits.append(line)
    return hits


def with_context(candidates: Sequence[int], total: int, *, before: int = CONTEXT_BEFORE,
                 after: int = CONTEXT_AFTER) -> list[int]:
    """The candidate lines and their neighbours, in order, each once."""
    kept: list[int] = []
    last = -1
    for line in candidates:
        start = max(line - before, last + 1)
        end = min(line + after, total - 1)
        kept.extend(range(start, end + 1))
        last = max(last, end)
    return kept


SCAN_CHUNK_BYTES = 8 * 1024 * 1024
EVIDENCE_BUDGET_CHARS = 1024 * 1024  # the first failures and their context; never the whole log


def evidence_before(handle: BinaryIO, end: int, *, budget: int = EVIDENCE_BUDGET_CHARS) -> str:
    """The candidate lines (with context) of the first ``end`` bytes of a log, read in chunks:
    an early failure that a flood of output pushed out of the tail, in bounded memory.

    Stops once ``budget`` characters of evidence are kept: the first failure is what matters.
    """
    kept: list[str] = []
    size = 0
    carry = b""
    offset = handle.seek(0)
    while offset < end and size < budget:
        data = carry + handle.read(min(SCAN_CHUNK_BYTES, end - offset))
        if not data or len(data) == len(carry):
            break
        offset += len(data) - len(carry)
        cut = data.rfind(b"\n") + 1 if offset < end else len(data)
        if cut == 0:
            cut = len(data)  # one line longer than a chunk: read as it is
        data, carry = data[:cut], data[cut:]
        lines, hits = split_with_candidates(data.decode("utf-8", "replace"))
        chosen = with_context(hits, len(lines))
        if chosen:
            block = "\n".join(lines[i] for i in chosen) + "\n"
            kept.append(block)
            size += len(block)
    return "".join(kept)[:budget]
