"""Words for a diagnosis and a suggestion: the sentence ``fix`` opens with and the knob diffs."""

from __future__ import annotations

from typing import Mapping

from gpudoc.ladder.model import Suggestion
from gpudoc.units import format_bytes

SPEC_DIAGNOSIS_KEYS = (
    "cause", "backend", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
    "reserved_unallocated_bytes", "other_processes", "gpu_index", "rank", "exit_code", "summary",
)


def complete_diagnosis(diag: Mapping) -> dict:
    """Every SPEC key present (null where unknown), extra keys kept."""
    out = {key: diag.get(key) for key in SPEC_DIAGNOSIS_KEYS}
    out["other_processes"] = list(diag.get("other_processes") or [])
    out["summary"] = diag.get("summary") or ""
    out.update({k: v for k, v in diag.items() if k not in out})
    return out


def explain(diag: Mapping) -> str:
    """One sentence: who failed where, asked vs free, and what the real problem was."""
    cause = diag.get("cause")
    who = f"Rank {diag['rank']}" if diag.get("rank") is not None else "The job"
    where = f"GPU {diag['gpu_index']}" if diag.get("gpu_index") is not None else "the GPU"
    if cause != "gpu_oom":
        summary = (diag.get("summary") or "").strip().rstrip(".")
        labels = {
            "host_oom": f"{who} was killed because the host ran out of RAM (not GPU memory)",
            "shm": f"{who} ran out of shared memory (/dev/shm), not GPU memory",
            "nccl_timeout": f"{who} hit an NCCL collective timeout, usually the echo of another rank's failure",
            "signal": f"{who} was killed by a signal from outside",
            "ok": "The run finished without a failure",
            "error": f"{who} failed with an error that is not about memory",
        }
        head = labels.get(cause, f"{who} failed ({cause or 'unknown cause'})")
        return f"{head}: {summary}." if summary and cause != "ok" else f"{head}."
    backend = diag.get("backend")
    memory = "GPU memory" if backend in (None, "cuda", "hip") else f"{backend.upper()} device memory"
    parts = [f"{who} ran out of {memory} on {where}"]
    requested, free, total = diag.get("requested_bytes"), diag.get("free_bytes"), diag.get("total_bytes")
    if requested is not None:
        asked = f"it asked for {format_bytes(requested)}"
        if free is not None:
            asked += f" with {format_bytes(free)} free"
            if total:
                asked += f" of {format_bytes(total)}"
        elif total:
            asked += f" on a {format_bytes(total)} card"
        detail = []
        if diag.get("allocated_bytes") is not None:
            detail.append(f"{format_bytes(diag['allocated_bytes'])} allocated by PyTorch")
        if diag.get("reserved_unallocated_bytes") is not None:
            detail.append(f"{format_bytes(diag['reserved_unallocated_bytes'])} reserved but unallocated")
        if detail:
            asked += " (" + ", ".join(detail) + ")"
        parts.append(asked)
    others = [p for p in (diag.get("other_processes") or []) if (p.get("bytes") or 0) > 0]
    held = sum(int(p["bytes"]) for p in others)
    frag = diag.get("reserved_unallocated_bytes") or 0
    short = (requested - free) if requested is not None and free is not None else None
    if others:
        pids = ", ".join(str(p["pid"]) for p in others[:4])
        verdict = (
            "they were the real problem" if short is not None and held >= short
            else "freeing it alone would not be enough"
        )
        parts.append(f"other processes (PID {pids}) held {format_bytes(held)}: {verdict}")
    if requested is not None and frag and frag >= requested:
        parts.append("fragmentation was the real problem: the reserved-but-unallocated memory alone could have served the request")
    elif short is not None and short <= 0:
        parts.append("enough was free, so fragmentation or an allocation limit made it fail")
    if requested is not None and total and requested > total:
        parts.append("the single allocation was bigger than the whole card")
    if len(parts) == 1:
        return parts[0] + "."
    return parts[0] + ": " + "; ".join(parts[1:]) + "."


def knob_diff_lines(suggestion: Suggestion, *, current_env: Mapping[str, str] | None = None) -> list[str]:
    rows: list[tuple[str, str, str]] = []
    for knob, (old, new) in suggestion.changes.items():
        rows.append((knob, _value(old), _value(new)))
    for var, value in suggestion.env.items():
        old = (current_env or {}).get(var)
        rows.append((var, old if old is not None else "(unset)", value))
    width = max((len(r[0]) for r in rows), default=0)
    return [f"{name:<{width}}  {old} → {new}" for name, old, new in rows]


def saving_text(suggestion: Suggestion) -> str:
    saving = suggestion.expected_saving_bytes
    if saving is None:
        return "saving not estimated"
    if saving < 0:
        return f"uses about {format_bytes(-saving)} more per GPU"
    return f"expected to free about {format_bytes(saving)} per GPU"


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
