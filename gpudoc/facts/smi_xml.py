"""`nvidia-smi -q -x` XML (DTD v10 to v13, or none) as GPU facts."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

from gpudoc.errors import InputError
from gpudoc.facts import smi_values as v
from gpudoc.facts.model import Gpu, GpuProcess, MigDevice


def _parse_xml(path: Path, text: str) -> v.Part:
    # The DOCTYPE names an external DTD that is never shipped with the output: drop it.
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(text)  # noqa: S314 - the DOCTYPE is dropped above and expat refuses external entities
    except ET.ParseError as exc:
        raise InputError(f"{path}: not well-formed XML ({exc}); {v.EXPECTED}") from None
    if root.tag != "nvidia_smi_log":
        raise InputError(f"{path}: XML root is <{root.tag}>, not <nvidia_smi_log> ({v.EXPECTED})")
    part = v.Part(path, "xml")
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
    return None if v.is_na(text) else text


def _xml_raw(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _xml_gpu(index: int, node: ET.Element) -> Gpu:
    f = v.Fields("nvidia-smi -q -x")

    def put(name: str, path: str, convert: Callable[[str], Any] = lambda v: v) -> None:
        raw = _xml_raw(node, path)
        given = None if raw is None or v.is_na(raw) else raw
        f.set(name, None if given is None else convert(given), raw)

    put("name", "product_name")
    put("uuid", "uuid")
    bus = node.get("id") or _xml_raw(node, "pci/pci_bus_id")
    f.set("bus_id", bus, bus)
    put("memory_total_bytes", "fb_memory_usage/total", v.mib)
    put("memory_used_bytes", "fb_memory_usage/used", v.mib)
    put("memory_free_bytes", "fb_memory_usage/free", v.mib)
    put("utilization_gpu_percent", "utilization/gpu_util", v.number)
    put("utilization_memory_percent", "utilization/memory_util", v.number)
    put("temperature_c", "temperature/gpu_temp", v.number)
    put("ecc_mode", "ecc_mode/current_ecc", v.enabled)
    corrected, uncorrected = _xml_ecc(node.find("ecc_errors/volatile"))
    for name, value in (("ecc_errors_corrected", corrected), ("ecc_errors_uncorrected", uncorrected)):
        f.set(name, value, "N/A")
        if value is None:
            f.unavailable[name] = "nvidia-smi -q -x says N/A (ECC off or not supported)"
    put("retired_pages_pending", "retired_pages/pending_retirement", v.yes_no)
    f.set("throttle_reasons", _xml_throttle(node), None)
    if f.values["throttle_reasons"] is None:
        f.unavailable["throttle_reasons"] = "not in this nvidia-smi -q -x output"
    f.set("mig", _xml_mig(node), None)
    if f.values["mig"] is None:
        raw = _xml_raw(node, "mig_mode/current_mig")
        f.unavailable["mig"] = v.na_reason(raw, "nvidia-smi -q -x") if raw else "no MIG in this nvidia-smi output"
    put("compute_mode", "compute_mode", v.compute_mode)
    put("persistence_mode", "persistence_mode", v.enabled)
    cap = _xml_raw(node, "compute_cap") or None
    f.set("compute_capability", None if v.is_na(cap) else cap, cap)
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
        value = v.as_int(_xml_raw(volatile, tag))
        if value is not None:
            bucket.append(value)
    # v11+: sram_correctable, dram_uncorrectable, sram_uncorrectable_parity, ...
    for child in volatile:
        if len(child):
            continue
        value = v.as_int(child.text)
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
        name = v.THROTTLE_ALIASES.get(name, name)
        if name != "gpu_idle" and (child.text or "").strip().lower() == "active":
            active.append(name)
    return tuple(active)


def _xml_mig(node: ET.Element) -> dict | None:
    current = _xml_raw(node, "mig_mode/current_mig")
    if current is None or v.is_na(current):
        return None
    devices = []
    for position, dev in enumerate(node.findall("mig_devices/mig_device")):
        index = v.as_int(_xml_raw(dev, "index"))
        devices.append(v.mig_dict(MigDevice(
            index=position if index is None else index,
            gpu_instance_id=v.as_int(_xml_raw(dev, "gpu_instance_id")),
            compute_instance_id=v.as_int(_xml_raw(dev, "compute_instance_id")),
            memory_total_bytes=v.mib(_xml_raw(dev, "fb_memory_usage/total")),
            memory_used_bytes=v.mib(_xml_raw(dev, "fb_memory_usage/used")),
            memory_free_bytes=v.mib(_xml_raw(dev, "fb_memory_usage/free")),
            uuid=_xml_text(dev, "uuid"),
        )))
    return {"enabled": v.enabled(current) == "Enabled", "devices": devices}


def _xml_processes(node: ET.Element) -> tuple[GpuProcess, ...] | None:
    procs = node.find("processes")
    if procs is None:
        return None
    found = []
    for info in procs.findall("process_info"):
        pid = v.as_int(_xml_raw(info, "pid"))
        if pid is None:
            continue
        found.append(GpuProcess(
            pid=pid,
            used_memory_bytes=v.mib(_xml_raw(info, "used_memory")),
            name=_xml_text(info, "process_name"),
            type=_xml_text(info, "type"),
            gpu_instance_id=v.as_int(_xml_raw(info, "gpu_instance_id")),
            compute_instance_id=v.as_int(_xml_raw(info, "compute_instance_id")),
        ))
    return tuple(found)
