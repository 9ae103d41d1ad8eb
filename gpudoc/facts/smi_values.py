"""Values as nvidia-smi prints them (N/A spellings, MiB sizes, Enabled/Disabled), read the same way
by every saved format, and what one file contributed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoc.facts.model import Facts, Gpu, GpuProcess, MigDevice
from gpudoc.units import MIB

EXPECTED = (
    "expected `nvidia-smi -q -x` XML, `nvidia-smi --query-gpu=... --format=csv` or "
    "`--query-compute-apps=... --format=csv` output, the plain `nvidia-smi` table, "
    "or `gpudoc check --json`"
)

# nvidia-smi prints these where a value does not exist; the bracketed forms are the CSV spelling.
_NA_RE = re.compile(r"^\[?\s*(n/a|not supported|unknown error|requested functionality has been deprecated"
                    r"|insufficient permissions|gpu requires reset|not available|none)?\s*\]?$", re.I)
NUM_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)\s*$")

THROTTLE_ALIASES = {"display_clocks_setting": "display_clock_setting", "user_defined_clocks":
                     "applications_clocks_setting"}

COMPUTE_MODES = {
    "default": "Default",
    "e. process": "Exclusive_Process",
    "exclusive_process": "Exclusive_Process",
    "e. thread": "Exclusive_Thread",
    "exclusive_thread": "Exclusive_Thread",
    "prohibited": "Prohibited",
}


@dataclass
class Part:
    """What one file contributed."""

    path: Path
    kind: str  # xml, query-gpu, compute-apps, table, gpudoc-json
    gpus: list[Gpu] = field(default_factory=list)
    # compute-apps rows: (bus_id, uuid, gpu_name, GpuProcess)
    process_rows: list[tuple[str | None, str | None, str | None, GpuProcess]] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    facts: Facts | None = None  # gpudoc JSON carries everything




def is_na(value: str | None) -> bool:
    return value is None or bool(_NA_RE.match(value.strip()))


def given(value: str | None) -> str | None:
    """The value, stripped, or None when nvidia-smi printed none (N/A, [Not Supported], ...)."""
    return None if value is None or is_na(value) else value.strip()


def na_reason(value: str | None, what: str) -> str:
    if value is None:
        return f"not in this {what}"
    text = value.strip().strip("[]").strip()
    return f"{what} says {text or 'nothing'}"


def number(value: str | None) -> float | None:
    text = given(value)
    if text is None:
        return None
    match = NUM_RE.match(text)
    return float(match.group(1)) if match else None


def mib(value: str | None) -> int | None:
    """``"81559 MiB"`` / ``"81559MiB"`` / ``"81559"`` (MiB is nvidia-smi's only memory unit)."""
    found = number(value)
    return None if found is None else int(found * MIB)


def as_int(value: str | None) -> int | None:
    found = number(value)
    return None if found is None else int(found)


def enabled(value: str | None) -> str | None:
    text = given(value)
    if text is None:
        return None
    low = text.lower()
    if low in ("on", "enabled", "yes"):
        return "Enabled"
    if low in ("off", "disabled", "no"):
        return "Disabled"
    return text


def yes_no(value: str | None) -> bool | None:
    text = given(value)
    return None if text is None else text.lower() in ("yes", "true", "1", "active")


def compute_mode(value: str | None) -> str | None:
    text = given(value)
    return None if text is None else COMPUTE_MODES.get(text.lower(), text)


def bus_key(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """``00000000:83:00.0`` and ``0000:83:00.0`` name the same device."""
    if not bus_id:
        return None
    match = re.match(r"^\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*$", bus_id)
    if not match:
        return None
    return tuple(int(g, 16) for g in match.groups())  # type: ignore[return-value]


class Fields:
    """Collects Gpu keyword arguments and the reason for each value that is missing."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.values: dict = {}
        self.unavailable: dict[str, str] = {}

    def set(self, name: str, value: Any, raw: str | None = None) -> None:
        self.values[name] = value
        if value is None:
            self.unavailable[name] = na_reason(raw, self.what)

    def gpu(self, index: int) -> Gpu:
        return Gpu(index=index, **self.values, unavailable=dict(self.unavailable))


def mig_dict(dev: MigDevice) -> dict:
    return {
        "index": dev.index,
        "gpu_instance_id": dev.gpu_instance_id,
        "compute_instance_id": dev.compute_instance_id,
        "memory_total_bytes": dev.memory_total_bytes,
        "memory_used_bytes": dev.memory_used_bytes,
        "memory_free_bytes": dev.memory_free_bytes,
        "uuid": dev.uuid,
    }
