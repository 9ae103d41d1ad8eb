"""GPU facts from saved files instead of NVML: diagnose a box from what someone pasted.

Accepted, detected from the content (never the file name):

- ``nvidia-smi -q -x`` XML (DTD v10 to v13, or none);
- ``nvidia-smi --query-gpu=... --format=csv`` (units in the header and/or the values, or neither);
- ``nvidia-smi --query-compute-apps=... --format=csv`` (processes; merged into the GPUs of another
  file by bus id, or by UUID when UUIDs are unique — captures often mask every UUID to the same
  ``GPU-00000000-...``);
- the plain ``nvidia-smi`` table (old 79-column layout, the newer one with MIG and GI/CI columns);
- gpudoc's own ``check --json`` (the whole document, or the ``facts`` object alone).

Several files combine: GPUs found in more than one file are merged (values from the first file
win, gaps are filled from the later ones), processes from a compute-apps file are attached to
their GPUs. Sizes are MiB in all nvidia-smi outputs and become bytes here.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from gpudoc.errors import InputError
from gpudoc.facts.model import Facts, Gpu, GpuProcess, MigDevice
from gpudoc.facts.nvml import decode_throttle_reasons
from gpudoc.units import MIB

EXPECTED = (
    "expected `nvidia-smi -q -x` XML, `nvidia-smi --query-gpu=... --format=csv` or "
    "`--query-compute-apps=... --format=csv` output, the plain `nvidia-smi` table, "
    "or `gpudoc check --json`"
)

# nvidia-smi prints these where a value does not exist; the bracketed forms are the CSV spelling.
_NA_RE = re.compile(r"^\[?\s*(n/a|not supported|unknown error|requested functionality has been deprecated"
                    r"|insufficient permissions|gpu requires reset|not available|none)?\s*\]?$", re.I)
_NUM_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)\s*$")

_THROTTLE_ALIASES = {"display_clocks_setting": "display_clock_setting", "user_defined_clocks":
                     "applications_clocks_setting"}

_COMPUTE_MODES = {
    "default": "Default",
    "e. process": "Exclusive_Process",
    "exclusive_process": "Exclusive_Process",
    "e. thread": "Exclusive_Thread",
    "exclusive_thread": "Exclusive_Thread",
    "prohibited": "Prohibited",
}


def load_snapshot(paths: Iterable[Path | str]) -> Facts:
    """Read one or more saved outputs into one ``Facts``. Raises ``InputError`` naming the file."""
    files = [Path(p) for p in paths]
    if not files:
        raise InputError("no snapshot file given")
    return _combine([_parse_file(path) for path in files], files)


# ---------------------------------------------------------------------------------------------
# Reading and format detection


@dataclass
class _Part:
    """What one file contributed."""

    path: Path
    kind: str  # xml, query-gpu, compute-apps, table, gpudoc-json
    gpus: list[Gpu] = field(default_factory=list)
    # compute-apps rows: (bus_id, uuid, gpu_name, GpuProcess)
    process_rows: list[tuple[str | None, str | None, str | None, GpuProcess]] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    facts: Facts | None = None  # gpudoc JSON carries everything


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    # PowerShell's `>` writes UTF-16 with a BOM; everything else is UTF-8 (or ASCII).
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _parse_file(path: Path) -> _Part:
    text = _read_text(path)
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{path}: the file is empty ({EXPECTED})")
    if stripped.startswith("<"):
        return _parse_xml(path, text)
    if stripped.startswith("{"):
        return _parse_json(path, text)
    first = stripped.splitlines()[0]
    if "," in first and not first.startswith(("|", "+")):
        part = _parse_csv(path, text)
        if part is not None:
            return part
    headers = _TABLE_HEADER_RE.findall(text)
    if len(headers) > 1:
        raise InputError(
            f"{path}: holds {len(headers)} nvidia-smi tables (several captures in one file?); "
            "save one command's output per file"
        )
    if headers:
        return _parse_table(path, text)
    raise InputError(f"{path}: not a recognised nvidia-smi output ({EXPECTED})")


# ---------------------------------------------------------------------------------------------
# Small value helpers shared by the formats


def _is_na(value: str | None) -> bool:
    return value is None or bool(_NA_RE.match(value.strip()))


def _given(value: str | None) -> str | None:
    """The value, stripped, or None when nvidia-smi printed none (N/A, [Not Supported], ...)."""
    return None if value is None or _is_na(value) else value.strip()


def _na_reason(value: str | None, what: str) -> str:
    if value is None:
        return f"not in this {what}"
    text = value.strip().strip("[]").strip()
    return f"{what} says {text or 'nothing'}"


def _number(value: str | None) -> float | None:
    text = _given(value)
    if text is None:
        return None
    match = _NUM_RE.match(text)
    return float(match.group(1)) if match else None


def _mib(value: str | None) -> int | None:
    """``"81559 MiB"`` / ``"81559MiB"`` / ``"81559"`` (MiB is nvidia-smi's only memory unit)."""
    number = _number(value)
    return None if number is None else int(number * MIB)


def _int(value: str | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _enabled(value: str | None) -> str | None:
    text = _given(value)
    if text is None:
        return None
    low = text.lower()
    if low in ("on", "enabled", "yes"):
        return "Enabled"
    if low in ("off", "disabled", "no"):
        return "Disabled"
    return text


def _yes_no(value: str | None) -> bool | None:
    text = _given(value)
    return None if text is None else text.lower() in ("yes", "true", "1", "active")


def _compute_mode(value: str | None) -> str | None:
    text = _given(value)
    return None if text is None else _COMPUTE_MODES.get(text.lower(), text)


def bus_key(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """``00000000:83:00.0`` and ``0000:83:00.0`` name the same device."""
    if not bus_id:
        return None
    match = re.match(r"^\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*$", bus_id)
    if not match:
        return None
    return tuple(int(g, 16) for g in match.groups())  # type: ignore[return-value]


class _Fields:
    """Collects Gpu keyword arguments and the reason for each value that is missing."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.values: dict = {}
        self.unavailable: dict[str, str] = {}

    def set(self, name: str, value: Any, raw: str | None = None) -> None:
        self.values[name] = value
        if value is None:
            self.unavailable[name] = _na_reason(raw, self.what)

    def gpu(self, index: int) -> Gpu:
        return Gpu(index=index, **self.values, unavailable=dict(self.unavailable))


# ---------------------------------------------------------------------------------------------
# nvidia-smi -q -x


def _parse_xml(path: Path, text: str) -> _Part:
    # The DOCTYPE names an external DTD that is never shipped with the output: drop it.
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(text)  # noqa: S314 - the DOCTYPE is dropped above and expat refuses external entities
    except ET.ParseError as exc:
        raise InputError(f"{path}: not well-formed XML ({exc}); {EXPECTED}") from None
    if root.tag != "nvidia_smi_log":
        raise InputError(f"{path}: XML root is <{root.tag}>, not <nvidia_smi_log> ({EXPECTED})")
    part = _Part(path, "xml")
    part.driver_version = _xml_text(root, "driver_version")
    part.cuda_driver_version = _xml_text(root, "cuda_version")
    for index, node in enumerate(root.findall("gpu")):
        part.gpus.append(_xml_gpu(index, node))
    return part


def _xml_text(node: ET.Element | None, path: str) -> str | None:
    """Text of a child element; None when missing or N/A."""
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if _is_na(text) else text


def _xml_raw(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _xml_gpu(index: int, node: ET.Element) -> Gpu:
    f = _Fields("nvidia-smi -q -x")

    def put(name: str, path: str, convert: Callable[[str], Any] = lambda v: v) -> None:
        raw = _xml_raw(node, path)
        given = None if raw is None or _is_na(raw) else raw
        f.set(name, None if given is None else convert(given), raw)

    put("name", "product_name")
    put("uuid", "uuid")
    bus = node.get("id") or _xml_raw(node, "pci/pci_bus_id")
    f.set("bus_id", bus, bus)
    put("memory_total_bytes", "fb_memory_usage/total", _mib)
    put("memory_used_bytes", "fb_memory_usage/used", _mib)
    put("memory_free_bytes", "fb_memory_usage/free", _mib)
    put("utilization_gpu_percent", "utilization/gpu_util", _number)
    put("utilization_memory_percent", "utilization/memory_util", _number)
    put("temperature_c", "temperature/gpu_temp", _number)
    put("ecc_mode", "ecc_mode/current_ecc", _enabled)
    corrected, uncorrected = _xml_ecc(node.find("ecc_errors/volatile"))
    for name, value in (("ecc_errors_corrected", corrected), ("ecc_errors_uncorrected", uncorrected)):
        f.set(name, value, "N/A")
        if value is None:
            f.unavailable[name] = "nvidia-smi -q -x says N/A (ECC off or not supported)"
    put("retired_pages_pending", "retired_pages/pending_retirement", _yes_no)
    f.set("throttle_reasons", _xml_throttle(node), None)
    if f.values["throttle_reasons"] is None:
        f.unavailable["throttle_reasons"] = "not in this nvidia-smi -q -x output"
    f.set("mig", _xml_mig(node), None)
    if f.values["mig"] is None:
        raw = _xml_raw(node, "mig_mode/current_mig")
        f.unavailable["mig"] = _na_reason(raw, "nvidia-smi -q -x") if raw else "no MIG in this nvidia-smi output"
    put("compute_mode", "compute_mode", _compute_mode)
    put("persistence_mode", "persistence_mode", _enabled)
    cap = _xml_raw(node, "compute_cap") or None
    f.set("compute_capability", None if _is_na(cap) else cap, cap)
    f.set("processes", _xml_processes(node), None)
    if f.values["processes"] is None:
        f.unavailable["processes"] = "no <processes> element in this nvidia-smi -q -x output"
    return f.gpu(index)


def _xml_ecc(volatile: ET.Element | None) -> tuple[int | None, int | None]:
    """Volatile corrected / uncorrected totals across the layouts of DTD v10 to v13."""
    if volatile is None:
        return None, None
    corrected: list[int] = []
    uncorrected: list[int] = []
    # v10-ish: <single_bit><total/></single_bit> <double_bit><total/></double_bit>
    for tag, bucket in (("single_bit/total", corrected), ("double_bit/total", uncorrected)):
        value = _int(_xml_raw(volatile, tag))
        if value is not None:
            bucket.append(value)
    # v11+: sram_correctable, dram_uncorrectable, sram_uncorrectable_parity, ...
    for child in volatile:
        if len(child):
            continue
        value = _int(child.text)
        if value is None:
            continue
        if child.tag.endswith("_correctable"):
            corrected.append(value)
        elif "_uncorrectable" in child.tag:
            uncorrected.append(value)
    return (sum(corrected) if corrected else None, sum(uncorrected) if uncorrected else None)


def _xml_throttle(node: ET.Element) -> tuple[str, ...] | None:
    group = node.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if group is None:
        group = node.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if group is None:
        return None
    active = []
    for child in group:
        name = child.tag[len(prefix):] if child.tag.startswith(prefix) else child.tag
        name = _THROTTLE_ALIASES.get(name, name)
        if name != "gpu_idle" and (child.text or "").strip().lower() == "active":
            active.append(name)
    return tuple(active)


def _xml_mig(node: ET.Element) -> dict | None:
    current = _xml_raw(node, "mig_mode/current_mig")
    if current is None or _is_na(current):
        return None
    devices = []
    for position, dev in enumerate(node.findall("mig_devices/mig_device")):
        index = _int(_xml_raw(dev, "index"))
        devices.append(_mig_dict(MigDevice(
            index=position if index is None else index,
            gpu_instance_id=_int(_xml_raw(dev, "gpu_instance_id")),
            compute_instance_id=_int(_xml_raw(dev, "compute_instance_id")),
            memory_total_bytes=_mib(_xml_raw(dev, "fb_memory_usage/total")),
            memory_used_bytes=_mib(_xml_raw(dev, "fb_memory_usage/used")),
            memory_free_bytes=_mib(_xml_raw(dev, "fb_memory_usage/free")),
            uuid=_xml_text(dev, "uuid"),
        )))
    return {"enabled": _enabled(current) == "Enabled", "devices": devices}


def _mig_dict(dev: MigDevice) -> dict:
    return {
        "index": dev.index,
        "gpu_instance_id": dev.gpu_instance_id,
        "compute_instance_id": dev.compute_instance_id,
        "memory_total_bytes": dev.memory_total_bytes,
        "memory_used_bytes": dev.memory_used_bytes,
        "memory_free_bytes": dev.memory_free_bytes,
        "uuid": dev.uuid,
    }


def _xml_processes(node: ET.Element) -> tuple[GpuProcess, ...] | None:
    procs = node.find("processes")
    if procs is None:
        return None
    found = []
    for info in procs.findall("process_info"):
        pid = _int(_xml_raw(info, "pid"))
        if pid is None:
            continue
        found.append(GpuProcess(
            pid=pid,
            used_memory_bytes=_mib(_xml_raw(info, "used_memory")),
            name=_xml_text(info, "process_name"),
            type=_xml_text(info, "type"),
            gpu_instance_id=_int(_xml_raw(info, "gpu_instance_id")),
            compute_instance_id=_int(_xml_raw(info, "compute_instance_id")),
        ))
    return tuple(found)


# ---------------------------------------------------------------------------------------------
# --query-gpu / --query-compute-apps CSV

_UNIT_RE = re.compile(r"^(?P<key>[^\[]+?)\s*(?:\[(?P<unit>[^\]]*)\])?\s*$")
_GPU_KEYS = {"name", "uuid", "pci.bus_id", "index", "memory.total", "memory.used", "memory.free",
             "driver_version", "utilization.gpu", "temperature.gpu"}
_APP_KEYS = {"pid"}


def _parse_csv(path: Path, text: str) -> _Part | None:
    rows = [row for row in csv.reader(io.StringIO(text), skipinitialspace=True) if any(c.strip() for c in row)]
    if not rows:
        return None
    keys = []
    for name in rows[0]:
        match = _UNIT_RE.match(name.strip())
        keys.append(match.group("key").strip().lower() if match else name.strip().lower())
    keyset = set(keys)
    if keyset >= _APP_KEYS and ({"gpu_uuid", "gpu_bus_id", "gpu_name"} & keyset):
        return _parse_apps_csv(path, keys, rows[1:])
    if keyset & _GPU_KEYS:
        return _parse_gpu_csv(path, keys, rows[1:])
    return None


def _records(path: Path, keys: list[str], rows: list[list[str]]) -> list[dict[str, str | None]]:
    records = []
    for number, row in enumerate(rows, start=2):
        if len(row) > len(keys):
            # Unquoted commas in a value (Windows paths, process names): keep the extra cells in
            # the column that holds free text, which nvidia-smi never quotes.
            extra = len(row) - len(keys)
            # a trailing ", " is an empty last cell, not text
            while extra and not row[-1].strip():
                row = row[:-1]
                extra -= 1
            if extra:
                name_col = next((i for i, k in enumerate(keys) if k in ("process_name", "name")), None)
                if name_col is None:
                    raise InputError(f"{path}: line {number} has {len(row)} values for {len(keys)} columns")
                row = [*row[:name_col], ",".join(row[name_col:name_col + extra + 1]), *row[name_col + extra + 1:]]
        records.append({k: (row[i].strip() if i < len(row) else None) for i, k in enumerate(keys)})
    return records


def _parse_gpu_csv(path: Path, keys: list[str], rows: list[list[str]]) -> _Part:
    part = _Part(path, "query-gpu")
    what = "nvidia-smi --query-gpu"
    for position, rec in enumerate(_records(path, keys, rows)):
        f = _Fields(what)

        # Called only within this iteration, so the loop's `rec` and `f` are the ones meant.
        def put(name: str, key: str, convert: Callable[[str], Any] = lambda v: v, *alts: str) -> None:
            raw = rec.get(key)  # noqa: B023
            for alt in alts:
                if raw is None:
                    raw = rec.get(alt)  # noqa: B023
            given = None if raw is None or _is_na(raw) else raw
            f.set(name, None if given is None else convert(given), raw)  # noqa: B023

        put("name", "name", lambda v: v, "gpu_name")
        put("uuid", "uuid", lambda v: v, "gpu_uuid")
        put("bus_id", "pci.bus_id", lambda v: v, "gpu_bus_id")
        put("memory_total_bytes", "memory.total", _mib)
        put("memory_used_bytes", "memory.used", _mib)
        put("memory_free_bytes", "memory.free", _mib)
        if f.values["memory_total_bytes"] is None:
            # Some collectors skip memory.total; since driver 510 total = reserved + used + free.
            pieces = [_mib(rec.get(k)) for k in ("memory.reserved", "memory.used", "memory.free")]
            if all(p is not None for p in pieces):
                f.values["memory_total_bytes"] = sum(pieces)
                f.unavailable.pop("memory_total_bytes", None)
        put("utilization_gpu_percent", "utilization.gpu", _number)
        put("utilization_memory_percent", "utilization.memory", _number)
        put("temperature_c", "temperature.gpu", _number)
        put("ecc_mode", "ecc.mode.current", _enabled)
        put("ecc_errors_corrected", "ecc.errors.corrected.volatile.total", _int)
        put("ecc_errors_uncorrected", "ecc.errors.uncorrected.volatile.total", _int)
        put("retired_pages_pending", "retired_pages.pending", _yes_no)
        f.set("throttle_reasons", _csv_throttle(rec), None)
        if f.values["throttle_reasons"] is None:
            f.unavailable["throttle_reasons"] = f"not in this {what} output"
        mig_raw = rec.get("mig.mode.current")
        f.set("mig", None if _is_na(mig_raw) else {"enabled": _enabled(mig_raw) == "Enabled", "devices": []},
              mig_raw)
        put("compute_mode", "compute_mode", _compute_mode)
        put("persistence_mode", "persistence_mode", _enabled)
        put("compute_capability", "compute_cap")
        f.set("processes", None, None)
        f.unavailable["processes"] = "--query-gpu does not list processes (add a --query-compute-apps file)"
        index = _int(rec.get("index"))
        part.gpus.append(f.gpu(position if index is None else index))
        if part.driver_version is None and not _is_na(rec.get("driver_version")):
            part.driver_version = rec["driver_version"]
    return part


def _csv_throttle(rec: dict[str, str | None]) -> tuple[str, ...] | None:
    found = False
    active: list[str] = []
    for key, value in rec.items():
        for prefix in ("clocks_event_reasons.", "clocks_throttle_reasons."):
            if key.startswith(prefix):
                name = key[len(prefix):]
                if name in ("supported", "active"):
                    mask = value if key.endswith(".active") else None
                    if mask and not _is_na(mask):
                        found = True
                        try:
                            active.extend(decode_throttle_reasons(int(mask, 16)))
                        except ValueError:
                            pass
                    continue
                text = _given(value)
                if text is None:
                    continue
                found = True
                name = _THROTTLE_ALIASES.get(name, name)
                if name != "gpu_idle" and text.lower() == "active":
                    active.append(name)
    if not found:
        return None
    return tuple(dict.fromkeys(active))


def _parse_apps_csv(path: Path, keys: list[str], rows: list[list[str]]) -> _Part:
    part = _Part(path, "compute-apps")
    for rec in _records(path, keys, rows):
        pid = _int(rec.get("pid"))
        if pid is None:
            continue
        raw_mem = rec.get("used_gpu_memory", rec.get("used_memory"))
        name = rec.get("process_name", rec.get("name"))
        proc = GpuProcess(pid=pid, used_memory_bytes=_mib(raw_mem), name=None if _is_na(name) else name, type="C")
        uuid = rec.get("gpu_uuid")
        bus = rec.get("gpu_bus_id")
        gname = rec.get("gpu_name")
        part.process_rows.append((None if _is_na(bus) else bus, None if _is_na(uuid) else uuid,
                                  None if _is_na(gname) else gname, proc))
    return part


# ---------------------------------------------------------------------------------------------
# The plain nvidia-smi table

_TABLE_HEADER_RE = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_BUS_RE = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_GPU_LINE1 = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<pm>On|Off|WDDM|TCC|MCDM|N/A)\s*\|"
    r"\s*(?P<bus>" + _BUS_RE + r")\s+(?P<disp>\S+)\s*\|\s*(?P<ecc>.*?)\s*\|\s*$"
)
_GPU_LINE2 = re.compile(
    r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+.*?\|"
    r"\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*\|\s*(?P<util>\S+)\s+(?P<cmode>.+?)\s*\|\s*$"
)
_GPU_LINE3 = re.compile(r"^\|\s*\|\s*\|\s*(?P<mig>\S+)\s*\|\s*$")
_MIG_LINE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?P<ci>\d+)\s+(?P<dev>\d+)\s*\|"
    r"\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*\|"
)
_PROC_LINE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:(?P<gi>N/A|\d+)\s+(?P<ci>N/A|\d+)\s+)?(?P<pid>\d+)\s+"
    r"(?P<type>C\+G|M\+C|C|G|M)\s+(?P<name>.*?)\s+(?P<mem>\d+\s*MiB|N/A)\s*\|\s*$"
)


def _parse_table(path: Path, text: str) -> _Part:
    part = _Part(path, "table")
    header = _TABLE_HEADER_RE.search(text)
    if header is None:  # the sniffer only sends a file here when it found this header
        raise InputError(f"{path}: no nvidia-smi table header")
    part.driver_version = header.group(2)
    part.cuda_driver_version = header.group(3)
    wddm_layout = "Driver-Model" in text
    has_mig_column = "MIG M." in text
    lines = text.splitlines()

    gpus: dict[int, _Fields] = {}
    order: list[int] = []
    mig_devices: dict[int, list[dict]] = {}
    processes: dict[int, list[GpuProcess]] = {}
    section = "gpus"
    saw_process_header = False
    current: int | None = None
    what = "nvidia-smi table"
    for line in lines:
        if "MIG devices:" in line:
            section = "mig"
            continue
        if "Processes:" in line:
            section = "procs"
            saw_process_header = True
            continue
        if section == "gpus":
            m1 = _GPU_LINE1.match(line)
            if m1:
                current = int(m1.group("index"))
                f = _Fields(what)
                f.set("name", m1.group("name").strip())
                f.set("bus_id", m1.group("bus"))
                pm = m1.group("pm")
                if wddm_layout:
                    f.set("persistence_mode", None, None)
                    f.unavailable["persistence_mode"] = f"Windows driver model {pm}: no persistence mode"
                else:
                    f.set("persistence_mode", _enabled(pm), pm)
                ecc = m1.group("ecc")
                if ecc.isdigit():
                    f.set("ecc_mode", "Enabled")
                    f.set("ecc_errors_uncorrected", int(ecc))
                else:
                    f.set("ecc_mode", _enabled(ecc), ecc)
                    f.set("ecc_errors_uncorrected", None, ecc)
                    if not _is_na(ecc):
                        # Under MIG the column shows the mode; counts are per MIG device.
                        f.unavailable["ecc_errors_uncorrected"] = f"the table shows ECC {ecc}, not a count"
                gpus[current] = f
                order.append(current)
                continue
            m2 = _GPU_LINE2.match(line)
            if m2 and current is not None:
                f = gpus[current]
                total = int(m2.group("total")) * MIB
                used = int(m2.group("used")) * MIB
                f.set("memory_total_bytes", total)
                f.set("memory_used_bytes", used)
                # The table has no free column; nvidia-smi's own free is total - reserved - used,
                # so this over-states free memory by the driver's reservation (a few hundred MiB).
                f.set("memory_free_bytes", total - used)
                f.set("temperature_c", _number(m2.group("temp").rstrip("C")), m2.group("temp"))
                f.set("utilization_gpu_percent", _number(m2.group("util")), m2.group("util"))
                f.set("compute_mode", _compute_mode(m2.group("cmode")), m2.group("cmode"))
                continue
            m3 = _GPU_LINE3.match(line)
            if m3 and current is not None and has_mig_column:
                raw = m3.group("mig")
                gpus[current].set("mig", None if _is_na(raw) else {"enabled": _enabled(raw) == "Enabled",
                                                                    "devices": []}, raw)
        elif section == "mig":
            m = _MIG_LINE.match(line)
            if m:
                used = int(m.group("used")) * MIB
                total = int(m.group("total")) * MIB
                mig_devices.setdefault(int(m.group("gpu")), []).append(_mig_dict(MigDevice(
                    index=int(m.group("dev")),
                    gpu_instance_id=int(m.group("gi")),
                    compute_instance_id=int(m.group("ci")),
                    memory_total_bytes=total,
                    memory_used_bytes=used,
                    memory_free_bytes=total - used,
                )))
        elif section == "procs":
            m = _PROC_LINE.match(line)
            if m:
                gi, ci = m.group("gi"), m.group("ci")
                processes.setdefault(int(m.group("gpu")), []).append(GpuProcess(
                    pid=int(m.group("pid")),
                    used_memory_bytes=_mib(m.group("mem").replace(" ", "")),
                    name=m.group("name").strip() or None,
                    type=m.group("type"),
                    gpu_instance_id=_int(gi) if gi else None,
                    compute_instance_id=_int(ci) if ci else None,
                ))

    if not gpus:
        raise InputError(f"{path}: an nvidia-smi table without any GPU rows ({EXPECTED})")
    for index in order:
        f = gpus[index]
        if "mig" not in f.values:
            f.set("mig", None)
            f.unavailable["mig"] = "this nvidia-smi table has no MIG column"
        elif f.values["mig"] is not None:
            f.values["mig"]["devices"] = mig_devices.get(index, [])
        if saw_process_header:
            # An empty Processes table is a real answer: inside a container nvidia-smi cannot
            # see other namespaces' processes, so memory can be used with no process listed.
            f.set("processes", tuple(processes.get(index, ())))
        else:
            f.set("processes", None)
            f.unavailable["processes"] = "the Processes table is missing from this nvidia-smi output"
        for name in ("uuid", "utilization_memory_percent", "ecc_errors_corrected", "retired_pages_pending",
                     "throttle_reasons", "compute_capability"):
            if name not in f.values:
                f.set(name, None)
                f.unavailable[name] = "the plain nvidia-smi table does not show it"
        part.gpus.append(f.gpu(index))
    return part


# ---------------------------------------------------------------------------------------------
# gpudoc check --json


def _parse_json(path: Path, text: str) -> _Part:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); {EXPECTED}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: JSON is not an object ({EXPECTED})")
    body = data.get("facts", data)
    if not isinstance(body, dict) or "gpus" not in body or "collected_at" not in body:
        raise InputError(f"{path}: JSON without gpudoc facts (no \"facts\" with \"gpus\"); {EXPECTED}")
    try:
        facts = Facts.from_dict(body)
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: gpudoc facts that cannot be read back: {exc}") from None
    part = _Part(path, "gpudoc-json", gpus=list(facts.gpus), facts=facts)
    part.driver_version = facts.driver_version
    part.cuda_driver_version = facts.cuda_driver_version
    return part


# ---------------------------------------------------------------------------------------------
# Combining files


def _same_gpu(a: Gpu, b: Gpu, uuid_unique: bool) -> bool:
    ka, kb = bus_key(a.bus_id), bus_key(b.bus_id)
    if ka is not None and kb is not None:
        return ka == kb
    if uuid_unique and a.uuid and b.uuid:
        return a.uuid == b.uuid
    return a.index == b.index


def _merge_gpu(a: Gpu, b: Gpu) -> Gpu:
    changes = {}
    unavailable = dict(a.unavailable)
    for name in Gpu.__dataclass_fields__:
        if name in ("index", "unavailable"):
            continue
        if getattr(a, name) is None and getattr(b, name) is not None:
            changes[name] = getattr(b, name)
            unavailable.pop(name, None)
    if a.processes is not None and b.processes is not None:
        seen = {p.pid for p in a.processes}
        changes["processes"] = a.processes + tuple(p for p in b.processes if p.pid not in seen)
    return replace(a, **changes, unavailable=unavailable)


def _uuids_unique(gpus: list[Gpu]) -> bool:
    uuids = [g.uuid for g in gpus if g.uuid]
    return len(uuids) == len(set(uuids))


def _combine(parts: list[_Part], paths: list[Path]) -> Facts:
    base: Facts | None = next((p.facts for p in parts if p.facts is not None), None)
    gpus: list[Gpu] = []
    driver = cuda = None
    for part in parts:
        driver = driver or part.driver_version
        cuda = cuda or part.cuda_driver_version
        if part.kind == "compute-apps":
            continue
        unique = _uuids_unique(gpus + part.gpus) and _uuids_unique(part.gpus)
        for gpu in part.gpus:
            for i, known in enumerate(gpus):
                if _same_gpu(known, gpu, unique):
                    gpus[i] = _merge_gpu(known, gpu)
                    break
            else:
                gpus.append(gpu)

    for part in parts:
        if part.kind == "compute-apps":
            gpus = _attach_processes(part, gpus)

    source = "snapshot:" + ",".join(p.name for p in paths)
    collected = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if base is not None:
        return replace(base, source=source, gpus=tuple(gpus), driver_version=driver,
                       cuda_driver_version=cuda)
    return Facts(collected_at=collected, source=source, driver_version=driver, cuda_driver_version=cuda,
                 gpus=tuple(gpus))


def _attach_processes(part: _Part, gpus: list[Gpu]) -> list[Gpu]:
    """Give each compute-apps row to its GPU; GPUs only known from the rows are created."""
    unique = _uuids_unique(gpus)
    by_gpu: dict[int, list[GpuProcess]] = {}
    created: list[Gpu] = []
    for bus, uuid, gname, proc in part.process_rows:
        target = None
        key = bus_key(bus)
        candidates = gpus + created
        for position, gpu in enumerate(candidates):
            if key is not None and bus_key(gpu.bus_id) == key:
                target = position
                break
            if key is None and unique and uuid and gpu.uuid == uuid:
                target = position
                break
        if target is None and key is None and len(candidates) == 1:
            # A masked UUID on a one-GPU capture still means that GPU.
            target = 0
        if target is None:
            created.append(Gpu(
                index=len(candidates), name=gname, uuid=uuid, bus_id=bus,
                processes=(),
                unavailable={"memory_total_bytes": "only a --query-compute-apps file was given"},
            ))
            target = len(candidates)
        by_gpu.setdefault(target, []).append(proc)

    merged = []
    for position, gpu in enumerate(gpus + created):
        rows = by_gpu.get(position, [])
        have = {p.pid: p for p in (gpu.processes or ())}
        procs = list(gpu.processes or ())
        for proc in rows:
            if proc.pid in have:
                old = have[proc.pid]
                if old.used_memory_bytes is None and proc.used_memory_bytes is not None:
                    procs[procs.index(old)] = replace(old, used_memory_bytes=proc.used_memory_bytes)
            else:
                procs.append(proc)
        unavailable = dict(gpu.unavailable)
        unavailable.pop("processes", None)
        # --query-compute-apps lists every compute process, so a GPU without rows has none.
        merged.append(replace(gpu, processes=tuple(procs), unavailable=unavailable))
    return merged
