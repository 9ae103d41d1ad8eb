"""The end of a log, in bounded memory: what every diagnosis of a run reads."""

from __future__ import annotations

import os
from pathlib import Path

# What a diagnosis reads of a log: a failure is near the end, and a 12-hour log can be huge.
TAIL_BYTES = 2 * 1024 * 1024


def read_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log as text, from the start of a line; "" when unreadable.

    Memory stays bounded whatever the log's size (a 12-hour job, ``/dev/zero``)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError:
        return ""
    if size > limit:
        newline = data.find(b"\n")
        if 0 <= newline < 4096:
            data = data[newline + 1:]  # start on a whole line
    return data.decode("utf-8", "replace")
