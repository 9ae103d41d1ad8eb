"""One step of ``gpudoc run --retry-oom`` / ``gpudoc fix --rerun``: diagnose, pick a rung, write it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudoc.ladder import suggest
from gpudoc.ladder.apply import apply_changes
from gpudoc.ladder.model import Suggestion
from gpudoc.profiles.loader import load_profile_file
from gpudoc.profiles.model import Profile


def record_diagnosis(record: Any, store: Any = None) -> dict | None:
    """The record's diagnosis, or a fresh one from its log when the record has none."""
    diagnosis = getattr(record, "diagnosis", None)
    if isinstance(diagnosis, dict) and diagnosis.get("cause"):
        return diagnosis
    if store is None:
        from gpudoc.runs.store import RunStore

        store = RunStore()
    if not store.log_path(record.id).is_file():
        return None
    from gpudoc.diagnose import diagnose_text

    text = store.log_tail(record.id)
    own = [p.get("pid") for p in (getattr(record, "pids", None) or []) if isinstance(p, dict) and p.get("pid")]
    return diagnose_text(text, exit_code=getattr(record, "exit_code", None), own_pids=own).to_dict()


def next_attempt(
    record: Any,
    profile: Profile,
    *,
    allow_semantic: bool,
    facts: Any = None,
    store: Any = None,
    estimate: Any = None,
    cwd: Path | None = None,
    history: list | None = None,
) -> tuple[Profile | None, Suggestion | None]:
    """Apply the first rung that changes the profile; return the reloaded profile and the rung.

    free-stray-memory is not a profile change: the launcher's ``--clean`` handles strays, so it is
    passed over here. ``(None, None)`` when the failure is not a GPU OOM or the ladder is exhausted.
    """
    diagnosis = record_diagnosis(record, store)
    if not diagnosis:
        return None, None
    history = history if history is not None else [record]
    if facts is None:
        facts = job_torch_facts(record)
    result = suggest(diagnosis, profile, facts, history, allow_semantic=allow_semantic, estimate=estimate)
    chosen = result.first_profile_change()
    if chosen is None:
        return None, None
    path = apply_changes(profile, chosen, cwd=cwd)
    return load_profile_file(path, cwd=cwd), chosen


def job_python(record: Any) -> str:
    """The interpreter the recorded job ran: ``python ...``, or the shebang of ``torchrun`` and
    other console scripts; else this interpreter."""
    import os
    import shutil
    import sys

    command = list(getattr(record, "command", None) or [])
    if not command:
        return sys.executable
    exe = shutil.which(command[0], path=None) or command[0]
    if os.path.basename(command[0]).startswith("python"):
        return exe
    try:
        with open(exe, "rb") as handle:
            first = handle.readline(512).decode("utf-8", errors="replace")
    except OSError:
        return sys.executable
    if first.startswith("#!") and "python" in first:
        parts = first[2:].split()
        if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
            return shutil.which(parts[1]) or sys.executable
        if parts:
            return parts[0]
    return sys.executable


def job_torch_facts(record: Any) -> Any:
    """Facts holding only what the ladder needs from the job's torch: the allocator variable name."""
    try:
        from gpudoc.facts.model import Facts, TorchFacts
        from gpudoc.facts.torch_probe import alloc_env_name
        from gpudoc.runs.store import now_iso

        python = job_python(record)
        name = alloc_env_name(python)
    except Exception:  # noqa: BLE001 - without it the ladder picks the name every torch reads
        return None
    return Facts(collected_at=now_iso(), source="none", torch=TorchFacts(python=python, ok=True, alloc_env_name=name))
