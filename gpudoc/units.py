"""Byte sizes as people and tools print them, to and from integers.

NVIDIA and PyTorch print binary units (``MiB``, ``GiB``); some tools print ``MB``/``GB`` meaning the
same base-1024 sizes. Messages are parsed as printed: base 1024 for every unit spelling, except
where a caller explicitly asks for SI.
"""

from __future__ import annotations

import re

_BINARY = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
    "p": 1024**5,
    "pb": 1024**5,
    "pib": 1024**5,
    "e": 1024**6,  # only ever seen in an allocation request gone wrong (a corrupted size)
    "eb": 1024**6,
    "eib": 1024**6,
}
_SI = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "eb": 10**18}

SIZE_RE = re.compile(r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGTPE]i?B|[KMGTPE]|bytes?|B)?\b", re.IGNORECASE)


def parse_size(text: str, *, si: bool = False) -> int | None:
    """``"2.26 GiB"`` -> 2426656522. Returns None for text that is not one size (``"N/A"``)."""
    match = SIZE_RE.fullmatch(text.strip())
    if not match:
        return None
    unit = (match.group("unit") or "").lower()
    factor = _SI.get(unit) if si else None
    factor = factor or _BINARY.get(unit)
    if factor is None:
        return None
    return int(float(match.group("num")) * factor)


def format_bytes(n: int | float | None, *, precision: int = 1) -> str:
    """Human size in binary units, as nvidia-smi and PyTorch print them: ``21.5 GiB``."""
    if n is None:
        return "N/A"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            if unit == "B":
                return f"{sign}{int(n)} B"
            return f"{sign}{n:.{precision}f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float | None) -> str:
    """``5.8 s``, ``12m05s``, ``3h07m12s``: how long a run took, as the summary and `gpudoc runs` show it."""
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


GIB = 1024**3
MIB = 1024**2
