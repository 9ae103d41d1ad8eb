"""The plain `nvidia-smi` table (the old 79-column layout and the newer one with MIG columns), and
gpudoc's own `check --json`, as GPU facts."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpudoc.errors import InputError
from gpudoc.facts import smi_values as v
from gpudoc.facts.model import Facts, FactsFormatError, GpuProcess, MigDevice
from gpudoc.units import MIB

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


def _parse_table(path: Path, text: str) -> v.Part:
    part = v.Part(path, "table")
    header = _TABLE_HEADER_RE.search(text)
    if header is None:  # the sniffer only sends a file here when it found this header
        raise InputError(f"{path}: no nvidia-smi table header")
    part.driver_version = header.group(2)
    part.cuda_driver_version = header.group(3)
    wddm_layout = "Driver-Model" in text
    has_mig_column = "MIG M." in text
    lines = text.splitlines()

    gpus: dict[int, v.Fields] = {}
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
                f = v.Fields(what)
                f.set("name", m1.group("name").strip())
                f.set("bus_id", m1.group("bus"))
                pm = m1.group("pm")
                if wddm_layout:
                    f.set("persistence_mode", None, None)
                    f.unavailable["persistence_mode"] = f"Windows driver model {pm}: no persistence mode"
                else:
                    f.set("persistence_mode", v.enabled(pm), pm)
                ecc = m1.group("ecc")
                if ecc.isdigit():
                    f.set("ecc_mode", "Enabled")
                    f.set("ecc_errors_uncorrected", int(ecc))
                else:
                    f.set("ecc_mode", v.enabled(ecc), ecc)
                    f.set("ecc_errors_uncorrected", None, ecc)
                    if not v.is_na(ecc):
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
                f.set("temperature_c", v.number(m2.group("temp").rstrip("C")), m2.group("temp"))
                f.set("utilization_gpu_percent", v.number(m2.group("util")), m2.group("util"))
                f.set("compute_mode", v.compute_mode(m2.group("cmode")), m2.group("cmode"))
                continue
            m3 = _GPU_LINE3.match(line)
            if m3 and current is not None and has_mig_column:
                raw = m3.group("mig")
                gpus[current].set("mig", None if v.is_na(raw) else {"enabled": v.enabled(raw) == "Enabled",
                                                                    "devices": []}, raw)
        elif section == "mig":
            m = _MIG_LINE.match(line)
            if m:
                used = int(m.group("used")) * MIB
                total = int(m.group("total")) * MIB
                mig_devices.setdefault(int(m.group("gpu")), []).append(v.mig_dict(MigDevice(
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
                    used_memory_bytes=v.mib(m.group("mem").replace(" ", "")),
                    name=m.group("name").strip() or None,
                    type=m.group("type"),
                    gpu_instance_id=v.as_int(gi) if gi else None,
                    compute_instance_id=v.as_int(ci) if ci else None,
                ))

    if not gpus:
        raise InputError(f"{path}: an nvidia-smi table without any GPU rows ({v.EXPECTED})")
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




def _parse_json(path: Path, text: str) -> v.Part:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); {v.EXPECTED}", file=str(path)) from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: JSON is not an object ({v.EXPECTED})", file=str(path))
    # A whole `check --json` document has "facts"; the facts object alone has "gpus". Anything else
    # is some other JSON; past this point the file is gpudoc's, and what is wrong in it is named.
    if "facts" not in data and "gpus" not in data:
        raise InputError(f"{path}: JSON without gpudoc facts (no \"facts\" with \"gpus\"); {v.EXPECTED}",
                         file=str(path))
    prefix = "facts." if "facts" in data else ""
    body = data.get("facts", data)
    if isinstance(body, dict) and "gpus" not in body:
        # An empty list is an answer (the driver saw no GPU); a missing one is a document cut short.
        raise InputError(f"{path}: {prefix}gpus: missing (gpudoc facts always list the GPUs, [] for none)",
                         file=str(path), key=f"{prefix}gpus")
    try:
        facts = Facts.from_dict(data)
    except FactsFormatError as exc:
        raise InputError(f"{path}: {exc}", file=str(path), key=exc.key) from None
    problem = v.implausible_memory(facts.gpus)
    if problem is not None:
        raise InputError(f"{path}: {prefix}{problem.as_json()}", file=str(path), key=prefix + problem.key)
    part = v.Part(path, "gpudoc-json", gpus=list(facts.gpus), facts=facts)
    part.driver_version = facts.driver_version
    part.cuda_driver_version = facts.cuda_driver_version
    return part
