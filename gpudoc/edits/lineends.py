"""A text file's line endings, kept through an edit: the editors (tomlkit, ruamel, gpudoc's own)
work on LF text, and a file whose every line ends in CRLF (a Windows checkout) gets CRLF back.
A file that mixes endings is edited as it is: the editors change characters within a line.
"""

from __future__ import annotations

from pathlib import Path


def read_exact(path: Path) -> str:
    """The file's text with its line endings as written (``read_text`` turns CRLF into LF)."""
    return Path(path).read_bytes().decode("utf-8")


def is_crlf(text: str) -> bool:
    """Every line ends in CRLF."""
    return "\r\n" in text and text.count("\n") == text.count("\r\n")


def as_lf(text: str) -> tuple[str, bool]:
    """The text the editors see, and whether ``restore`` must put CRLF back."""
    crlf = is_crlf(text)
    return (text.replace("\r\n", "\n") if crlf else text), crlf


def restore(text: str, crlf: bool) -> str:
    """Edited LF text with the file's own line endings again."""
    return text.replace("\n", "\r\n") if crlf else text
