"""The memory figures inside a PyTorch CUDA out-of-memory message, in every generation's wording."""

from __future__ import annotations

import re

from gpudoc.diagnose.signatures import SIZE
from gpudoc.units import GIB, parse_size

# A CUDA context and the libraries' workspaces sit outside the allocator's figures: a process
# line within this of the allocator's reserved total is the job itself (seen from a container,
# whose PID namespace hides that the NVML pid is its own).
_CONTEXT_SLACK = int(1.5 * GIB)


def size_in(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return parse_size(m.group("v")) if m else None


def bytes_of(text: str | None) -> int | None:
    return parse_size(text) if text else None


def int_of(text: str | None) -> int | None:
    return int(text) if text else None


_OLD_AND_NEW = {
    "total_bytes": (rf"(?P<v>{SIZE}) total capacity", rf"total capac\w* of (?P<v>{SIZE})"),
    "free_bytes": (rf"(?P<v>{SIZE}) free\s*[;)]", rf"of which (?P<v>{SIZE}) is free", rf"GPU(?: \d+)? has (?P<v>{SIZE}) free"),
    "allocated_bytes": (rf"(?P<v>{SIZE}) already allocated", rf"(?P<v>{SIZE}) is allocated by PyTorch"),
}


def torch_figures(window: str, own_pids: frozenset) -> dict:
    out: dict = {}
    req = re.search(rf"Tried to allocate\s+(?:more than\s+)?(?P<v>{SIZE})", window)
    out["requested_bytes"] = parse_size(req.group("v")) if req else None
    gpu = re.search(r"\(GPU (\d+)\s*;", window) or re.search(r"\bGPU (\d*)\s*has a total capac", window)
    out["gpu_index"] = int(gpu.group(1)) if gpu and gpu.group(1) else None
    for key, patterns in _OLD_AND_NEW.items():
        for pattern in patterns:
            value = size_in(pattern, window)
            if value is not None:
                out[key] = value
                break
    reserved_total = size_in(rf"(?P<v>{SIZE}) reserved in total by PyTorch", window)
    cached = size_in(rf"(?P<v>{SIZE}) cached\)", window)  # <= 1.3: cached = reserved, not allocated
    unalloc = size_in(rf"(?P<v>{SIZE}) is reserved by PyTorch but unallocated", window)
    allocated = out.get("allocated_bytes")
    if unalloc is None and cached is not None:
        unalloc = cached
    if unalloc is None and reserved_total is not None and allocated is not None:
        unalloc = max(0, reserved_total - allocated)
    if reserved_total is None and unalloc is not None and allocated is not None:
        reserved_total = allocated + unalloc
    out["reserved_unallocated_bytes"] = unalloc
    out["reserved_bytes"] = reserved_total
    out["private_pools_bytes"] = size_in(rf"with (?P<v>{SIZE}) allocated in private pools", window)
    out["allowed_bytes"] = size_in(rf"(?P<v>{SIZE}) allowed\s*;", window)
    this_proc = size_in(rf"this process has (?P<v>{SIZE}) memory in use", window)
    procs = [(int(p), size) for p, s in re.findall(rf"Process (\d+) has ({SIZE}) memory in use", window)
             if (size := parse_size(s)) is not None]
    others = []
    for pid, size in procs:
        if pid in own_pids:
            this_proc = (this_proc or 0) + size
        else:
            others.append((pid, size))
    if this_proc is not None and procs and not any(pid in own_pids for pid, _ in procs):
        # "this process has X" and "Process P has X": P is the job itself, listed by NVML under
        # the PID the host sees (a container). It holds no memory another process took from it.
        same = next((pid for pid, size in others if size == this_proc), None)
        others = [(p, s) for p, s in others if p != same]
    elif this_proc is None and others and reserved_total is not None:
        # In a container NVML reports the job under its host PID, so it appears as "Process P".
        candidates = [(abs(size - reserved_total), pid, size) for pid, size in others
                      if reserved_total * 0.99 - 16 * 1024**2 <= size <= reserved_total + _CONTEXT_SLACK]
        if candidates:
            _, pid, size = min(candidates)
            this_proc = size
            others = [(p, s) for p, s in others if p != pid]
    out["this_process_bytes"] = this_proc
    out["other_processes"] = tuple(others)
    req_b = out["requested_bytes"]
    out["fragmentation"] = bool(req_b and unalloc is not None and unalloc >= req_b)
    return out
