"""`nvidia-smi --query-gpu=... --format=csv` and `--query-compute-apps=...` output as GPU facts."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any, Callable

from gpudoc.errors import InputError
from gpudoc.facts import smi_values as v
from gpudoc.facts.model import GpuProcess
from gpudoc.facts.nvml import decode_throttle_reasons

_UNIT_RE = re.compile(r"^(?P<key>[^\[]+?)\s*(?:\[(?P<unit>[^\]]*)\])?\s*$")
_GPU_KEYS = {"name", "uuid", "pci.bus_id", "index", "memory.total", "memory.used", "memory.free",
             "driver_version", "utilization.gpu", "temperature.gpu"}
_APP_KEYS = {"pid"}


def _parse_csv(path: Path, text: str) -> v.Part | None:
    # Lines first: a stray carriage return (a file saved on Windows, a capture cut short) is a line
    # end, not a csv error.
    try:
        rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if any(c.strip() for c in row)]
    except csv.Error as exc:
        raise InputError(f"{path}: not readable as nvidia-smi CSV: {exc}", file=str(path)) from None
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


def _parse_gpu_csv(path: Path, keys: list[str], rows: list[list[str]]) -> v.Part:
    part = v.Part(path, "query-gpu")
    what = "nvidia-smi --query-gpu"
    for position, rec in enumerate(_records(path, keys, rows)):
        f = v.Fields(what)

        # Called only within this iteration, so the loop's `rec` and `f` are the ones meant.
        def put(name: str, key: str, convert: Callable[[str], Any] = lambda v: v, *alts: str) -> None:
            raw = rec.get(key)  # noqa: B023
            for alt in alts:
                if raw is None:
                    raw = rec.get(alt)  # noqa: B023
            given = None if raw is None or v.is_na(raw) else raw
            f.set(name, None if given is None else convert(given), raw)  # noqa: B023

        put("name", "name", lambda v: v, "gpu_name")
        put("uuid", "uuid", lambda v: v, "gpu_uuid")
        put("bus_id", "pci.bus_id", lambda v: v, "gpu_bus_id")
        put("memory_total_bytes", "memory.total", v.mib)
        put("memory_used_bytes", "memory.used", v.mib)
        put("memory_free_bytes", "memory.free", v.mib)
        if f.values["memory_total_bytes"] is None:
            # Some collectors skip memory.total; since driver 510 total = reserved + used + free.
            pieces = [v.mib(rec.get(k)) for k in ("memory.reserved", "memory.used", "memory.free")]
            if all(p is not None for p in pieces):
                f.values["memory_total_bytes"] = sum(pieces)
                f.unavailable.pop("memory_total_bytes", None)
        put("utilization_gpu_percent", "utilization.gpu", v.number)
        put("utilization_memory_percent", "utilization.memory", v.number)
        put("temperature_c", "temperature.gpu", v.number)
        put("ecc_mode", "ecc.mode.current", v.enabled)
        put("ecc_errors_corrected", "ecc.errors.corrected.volatile.total", v.as_int)
        put("ecc_errors_uncorrected", "ecc.errors.uncorrected.volatile.total", v.as_int)
        put("retired_pages_pending", "retired_pages.pending", v.yes_no)
        f.set("throttle_reasons", _csv_throttle(rec), None)
        if f.values["throttle_reasons"] is None:
            f.unavailable["throttle_reasons"] = f"not in this {what} output"
        mig_raw = rec.get("mig.mode.current")
        f.set("mig", None if v.is_na(mig_raw) else {"enabled": v.enabled(mig_raw) == "Enabled", "devices": []},
              mig_raw)
        put("compute_mode", "compute_mode", v.compute_mode)
        put("persistence_mode", "persistence_mode", v.enabled)
        put("compute_capability", "compute_cap")
        f.set("processes", None, None)
        f.unavailable["processes"] = "--query-gpu does not list processes (add a --query-compute-apps file)"
        index = v.as_int(rec.get("index"))
        part.gpus.append(f.gpu(position if index is None else index))
        if part.driver_version is None and not v.is_na(rec.get("driver_version")):
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
                    if mask and not v.is_na(mask):
                        found = True
                        try:
                            active.extend(decode_throttle_reasons(int(mask, 16)))
                        except ValueError:
                            pass
                    continue
                text = v.given(value)
                if text is None:
                    continue
                found = True
                name = v.THROTTLE_ALIASES.get(name, name)
                if name != "gpu_idle" and text.lower() == "active":
                    active.append(name)
    if not found:
        return None
    return tuple(dict.fromkeys(active))


def _parse_apps_csv(path: Path, keys: list[str], rows: list[list[str]]) -> v.Part:
    part = v.Part(path, "compute-apps")
    for rec in _records(path, keys, rows):
        pid = v.as_int(rec.get("pid"))
        if pid is None:
            continue
        raw_mem = rec.get("used_gpu_memory", rec.get("used_memory"))
        name = rec.get("process_name", rec.get("name"))
        proc = GpuProcess(pid=pid, used_memory_bytes=v.mib(raw_mem), name=None if v.is_na(name) else name, type="C")
        uuid = rec.get("gpu_uuid")
        bus = rec.get("gpu_bus_id")
        gname = rec.get("gpu_name")
        part.process_rows.append((None if v.is_na(bus) else bus, None if v.is_na(uuid) else uuid,
                                  None if v.is_na(gname) else gname, proc))
    return part
