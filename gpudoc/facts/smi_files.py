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

What is read is checked here, once, so that checks can trust it: gpudoc JSON value by value against
the facts' types, every format for sizes no GPU reports (negative, past 16 TiB, used above the total).
A file that fails names itself and the value (``InputError``, exit 2). A --query-compute-apps file
alone with no rows says nothing of the GPUs and is refused rather than read as "no GPU".
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from gpudoc.errors import InputError
from gpudoc.facts import smi_values as v
from gpudoc.facts.model import Facts, Gpu, GpuProcess
from gpudoc.facts.smi_csv import _parse_csv
from gpudoc.facts.smi_table import _TABLE_HEADER_RE, _parse_json, _parse_table
from gpudoc.facts.smi_xml import _parse_xml


def load_snapshot(paths: Iterable[Path | str]) -> Facts:
    """Read one or more saved outputs into one ``Facts``. Raises ``InputError`` naming the file."""
    files = [Path(p) for p in paths]
    if not files:
        raise InputError("no snapshot file given")
    return _combine([_plausible(_parse_file(path)) for path in files], files)


def _plausible(part: v.Part) -> v.Part:
    """Refuse sizes no GPU reports (the JSON reader names them by their keys itself)."""
    problem = None if part.kind == "gpudoc-json" else v.implausible_memory(part.gpus)
    for position, (_, _, _, proc) in enumerate(part.process_rows):
        if problem is None:
            problem = v.implausible_size(f"processes[{position}]", f"process {proc.pid} used memory",
                                         proc.used_memory_bytes)
    if problem is not None:
        raise InputError(f"{part.path}: {problem.as_smi()}", file=str(part.path))
    return part


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}", file=str(path)) from None
    # PowerShell's `>` writes UTF-16 with a BOM; everything else is UTF-8 (or ASCII).
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _parse_file(path: Path) -> v.Part:
    text = _read_text(path)
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{path}: the file is empty ({v.EXPECTED})")
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
    raise InputError(f"{path}: not a recognised nvidia-smi output ({v.EXPECTED})")




def _same_gpu(a: Gpu, b: Gpu, uuid_unique: bool) -> bool:
    ka, kb = v.bus_key(a.bus_id), v.bus_key(b.bus_id)
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


def _combine(parts: list[v.Part], paths: list[Path]) -> Facts:
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

    if not gpus and all(part.kind == "compute-apps" for part in parts):
        # A --query-compute-apps capture names GPUs only in its rows; with none (an idle machine) it
        # says nothing of the GPUs, and "no GPU" would be a false diagnosis of the driver.
        raise InputError(
            f"{parts[0].path}: a --query-compute-apps capture without process rows holds no GPU facts; "
            "give the same machine's `nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,"
            "memory.used,memory.free --format=csv` (or `nvidia-smi -q -x`) output as another --snapshot",
            file=str(parts[0].path))
    source = "snapshot:" + ",".join(p.name for p in paths)
    collected = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if base is not None:
        return replace(base, source=source, gpus=tuple(gpus), driver_version=driver,
                       cuda_driver_version=cuda)
    return Facts(collected_at=collected, source=source, driver_version=driver, cuda_driver_version=cuda,
                 gpus=tuple(gpus))


def _attach_processes(part: v.Part, gpus: list[Gpu]) -> list[Gpu]:
    """Give each compute-apps row to its GPU; GPUs only known from the rows are created."""
    unique = _uuids_unique(gpus)
    by_gpu: dict[int, list[GpuProcess]] = {}
    created: list[Gpu] = []
    for bus, uuid, gname, proc in part.process_rows:
        target = None
        key = v.bus_key(bus)
        candidates = gpus + created
        for position, gpu in enumerate(candidates):
            if key is not None and v.bus_key(gpu.bus_id) == key:
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
