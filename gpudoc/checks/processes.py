"""Processes holding memory on the job's GPUs, classified, each with the exact remedy."""

from __future__ import annotations

from gpudoc.checks._common import CheckContext, gpu_list, target_gpus
from gpudoc.facts.holders import classify_gpu_processes
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile
from gpudoc.units import MIB, format_bytes

STRAY = "proc.stray"

# Display servers and desktop apps hold a few MiB on workstation GPUs; they are not worth a warning.
SMALL_HOLDER = 256 * MIB

_TITLE = {
    "orphan_of_run": "leftover of gpudoc run {run}",
    "own_live_job": "your live process",
    "own_other": "your orphaned process",
    "other_user": "{user}'s process",
    "invisible": "a PID not visible from this namespace",
    "zombie": "a zombie process",
    "unknown": "a process of the snapshot's machine",
}


def check_stray(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    gpus = target_gpus(facts, profile, ctx)
    indexes = [g.index for g in gpus]
    if gpus and all(g.processes is None for g in gpus):
        return [Finding(STRAY, Severity.SKIP, "the source does not list GPU processes",
                        f"source: {facts.source}",
                        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv  # give it to --snapshot too")]
    holders = classify_gpu_processes(facts, gpus=indexes)
    out: list[Finding] = []
    small = 0
    # Processes of another machine (a snapshot file): one line per GPU, /proc facts do not apply here.
    remote = [h for h in holders if h.kind == "unknown"]
    holders = [h for h in holders if h.kind != "unknown"]
    for index in dict.fromkeys(h.gpu_index for h in remote):
        group = [h for h in remote if h.gpu_index == index]
        sized = [h.bytes for h in group if h.bytes is not None]
        total = format_bytes(sum(sized)) if sized else "memory (N/A per process)"
        pids = ", ".join(f"{h.pid} ({h.name or '?'}{', ' + format_bytes(h.bytes) if h.bytes is not None else ''})"
                         for h in group[:8]) + (" ..." if len(group) > 8 else "")
        out.append(Finding(
            STRAY, Severity.INFO, f"GPU {index}: {len(group)} process(es) of the snapshot's machine hold {total}",
            f"PIDs {pids}; owners unknown: the facts come from a file ({facts.source})",
            f"on that machine: ps -o user,pid,ppid,cmd -p {','.join(str(h.pid) for h in group)}",
            (f"gpu:{index}", *(f"pid:{h.pid}" for h in group)),
        ))
    for h in holders:
        if h.kind not in ("orphan_of_run", "zombie", "invisible", "unlisted") and h.bytes is not None and h.bytes < SMALL_HOLDER:
            small += 1
            continue
        if h.pid is None:
            title = f"GPU {h.gpu_index}: {_size(h.bytes)} in use with no process listed"
        else:
            kind_title = _TITLE[h.kind].format(run=h.run_id, user=h.user or "another user")
            title = f"GPU {h.gpu_index}: {kind_title} holds {_size(h.bytes)}"
        severity = Severity.INFO if h.kind == "unknown" else Severity.WARN
        out.append(Finding(
            STRAY, severity, title,
            h.describe() + (f"; command: {' '.join(h.cmdline)[:160]}" if h.cmdline else ""),
            h.remedy(),
            tuple(x for x in (f"gpu:{h.gpu_index}", f"pid:{h.pid}" if h.pid is not None else None) if x),
        ))
    if not out:
        extra = f" ({small} process(es) under 256 MiB ignored: displays, desktops)" if small else ""
        out.append(Finding(STRAY, Severity.OK, f"no other process holds memory on GPU {gpu_list(indexes)}{extra}"))
    return out


def _size(n: int | None) -> str:
    return format_bytes(n) if n is not None else "memory (N/A)"
