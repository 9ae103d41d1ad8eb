"""Values as nvidia-smi prints them (N/A spellings, MiB sizes, Enabled/Disabled), read the same way
by every saved format, and what one file contributed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping

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


def _exact(value: str | None) -> Fraction | None:
    # Exact, however many digits: a float turns a mangled 400-digit value into infinity, which no
    # integer holds; as a fraction it stays a number that the plausibility check below can name.
    text = given(value)
    match = NUM_RE.match(text) if text is not None else None
    return Fraction(match.group(1)) if match else None


def mib(value: str | None) -> int | None:
    """``"81559 MiB"`` / ``"81559MiB"`` / ``"81559"`` (MiB is nvidia-smi's only memory unit)."""
    found = _exact(value)
    return None if found is None else int(found * MIB)


def as_int(value: str | None) -> int | None:
    found = _exact(value)
    return None if found is None else int(found)


# Far above any GPU made (the largest hold a few hundred GiB): a bigger size is a corrupted capture.
MAX_GPU_MEMORY_BYTES = 16 * 1024**4
_MEMORY_LABELS = {"memory_total_bytes": "memory total", "memory_used_bytes": "memory used",
                  "memory_free_bytes": "memory free"}


@dataclass(frozen=True)
class Implausible:
    """A memory size no GPU reports, and where it is: ``key`` is its path in the facts JSON."""

    key: str
    label: str  # how the nvidia-smi formats name it: "GPU 0 memory used"
    value: int
    why: str  # "negative", "beyond", "over-total"
    total: int | None = None

    def as_json(self) -> str:
        """For gpudoc JSON: the key and the value in bytes, as the file spells them."""
        return f"{self.key}: {self.value} {self._why(str(self.total))}"

    def as_smi(self) -> str:
        """For nvidia-smi output: the value in MiB, as nvidia-smi printed it."""
        return f"{self.label} {_mib_text(self.value)} {self._why(_mib_text(self.total))}"

    def _why(self, total: str) -> str:
        if self.why == "negative":
            return "is negative"
        if self.why == "beyond":
            return f"is more than any GPU holds ({MAX_GPU_MEMORY_BYTES // 1024**4} TiB): a corrupted capture?"
        return f"is more than the GPU's total ({total})"


def _mib_text(value: int | None) -> str:
    # Integer arithmetic only: a mangled size can be past what a float holds.
    whole, rest = divmod(value or 0, MIB)
    text = str(whole) if not rest else f"{whole}.{rest * 10 // MIB}"
    if len(str(whole)) > 16:  # a mangled capture's 400 digits say nothing more than their length
        text = f"{text[:6]}... ({len(str(whole))} digits)"
    return text + " MiB"


def implausible_memory(gpus: Iterable[Gpu]) -> Implausible | None:
    """The first memory size in these GPUs that no real GPU reports: negative, beyond 16 TiB, or
    used / free above the total. Checks do arithmetic on these; nonsense in is nonsense out."""
    for position, gpu in enumerate(gpus):
        where, name = f"gpus[{position}]", f"GPU {gpu.index}"
        sizes: list[tuple[str, str, Any, Any]] = [
            (f"{where}.{key}", f"{name} {label}", getattr(gpu, key), gpu.memory_total_bytes)
            for key, label in _MEMORY_LABELS.items()
        ]
        for i, dev in enumerate((gpu.mig or {}).get("devices") or ()):
            if isinstance(dev, Mapping):
                sizes += [(f"{where}.mig.devices[{i}].{key}", f"{name} MIG device {dev.get('index', i)} {label}",
                           dev.get(key), dev.get("memory_total_bytes")) for key, label in _MEMORY_LABELS.items()]
        for i, proc in enumerate(gpu.processes or ()):
            sizes.append((f"{where}.processes[{i}].used_memory_bytes", f"{name} process {proc.pid} used memory",
                          proc.used_memory_bytes, None))
        for key, label, value, total in sizes:
            found = implausible_size(key, label, value, None if key.endswith("memory_total_bytes") else total)
            if found is not None:
                return found
    return None


def implausible_size(key: str, label: str, value: Any, total: Any = None) -> Implausible | None:
    """``value`` (bytes; None or a non-integer is not this function's to judge) when no GPU reports it."""
    if not isinstance(value, int):
        return None
    if value < 0:
        return Implausible(key, label, value, "negative")
    if value > MAX_GPU_MEMORY_BYTES:
        return Implausible(key, label, value, "beyond")
    if isinstance(total, int) and 0 <= total < value:
        return Implausible(key, label, value, "over-total", total)
    return None


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
