"""`gpudoc fix`: say what went wrong, propose the next rungs of the tuning ladder, apply, rerun.

Flow: sources (run records, log files, stdin) -> diagnosis -> profile -> ladder -> render ->
optionally write the first profile-changing rung and relaunch the recorded command.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence, TextIO

from gpudoc.errors import ExitStatus, InputError, UsageError
from gpudoc.ladder import suggest
from gpudoc.ladder import upward_result
from gpudoc.ladder.apply import apply_changes, target_path
from gpudoc.ladder.explain import complete_diagnosis, explain, knob_diff_lines, saving_text
from gpudoc.ladder.model import LadderResult, Suggestion
from gpudoc.ladder.retry import job_python, job_torch_facts, profile_history, record_diagnosis
from gpudoc.output import Console
from gpudoc.profiles.loader import load_profile, load_profile_file
from gpudoc.profiles.model import Profile
from gpudoc.units import format_bytes


@dataclass
class Source:
    """One thing to diagnose: a run record (with its log) or a log text."""

    label: str
    record: Any = None
    text: str | None = None
    diagnosis: Any = None


def fix(
    console: Console,
    *,
    targets: Sequence[str] = (),
    logs: Sequence[str] = (),
    profile_name: str | None = None,
    apply: bool = False,
    rerun: bool = False,
    allow_semantic: bool = False,
    as_json: bool = False,
    store: Any = None,
    stdin: TextIO | None = None,
    facts: Any = None,
    estimate: Any = None,
    cwd: Path | None = None,
) -> int:
    """Diagnose, propose, and with ``apply``/``rerun`` act. 0 with a suggestion, 1 without."""
    from gpudoc.runs.store import RunStore

    cwd = Path(cwd or Path.cwd())
    if store is None:
        home = os.environ.get("GPUDOC_HOME")
        store = RunStore(Path(home) if home else cwd / ".gpudoc")
    sources = _sources(targets, logs, store, stdin or sys.stdin, cwd)
    diagnoses = [_diagnose(s, store) for s in sources]
    chosen_index, diag = _first_failure(sources, diagnoses, store)
    source = sources[chosen_index]
    record = source.record
    if rerun and record is None:
        raise UsageError("--rerun needs a run record (it relaunches the recorded command); give a RUN_ID, not a log")

    profile = _profile(profile_name, record, cwd)
    if facts is None and record is not None:
        # This machine's facts only describe the job when it ran here.
        facts = _local_facts(record) if record.host == socket.gethostname() else job_torch_facts(record)
    history = profile_history(profile, store, upto=record) if profile.path else ([record] if record else [])
    history = [r for r in history if r is not None]

    if diag.get("cause") == "ok" and record is not None:
        result = upward_result(profile, record, facts, estimate=estimate, history=history)
    else:
        result = suggest(diag, profile, facts, history, allow_semantic=allow_semantic, estimate=estimate)

    applied = None
    rerun_status = None
    notes_after: list[str] = []
    if apply or rerun:
        chosen = result.first_profile_change()
        strays = result.suggestions[0] if result.suggestions and not result.suggestions[0].changes_profile else None
        if strays is not None and _covers(strays, result):
            notes_after.append(
                "nothing written: the memory other processes held covers the shortfall; free it first "
                f"({_clean_command(diag)}, or relaunch with `gpudoc run --clean`)"
            )
            chosen = None
        if chosen is not None:
            path = apply_changes(profile, chosen, cwd=cwd)
            backup = path.with_name(path.name + ".gpudoc.bak")
            applied = {"rung": chosen.rung, "path": str(path), "backup": str(backup) if backup.exists() else None}
        elif not notes_after:
            notes_after.append("nothing written: no rung changes the profile")

    payload = {
        "diagnosis": complete_diagnosis(diag),
        "suggestions": [s.to_dict() for s in result.suggestions],
        "semantic_held_back": [s.to_dict() for s in result.semantic_held_back],
        "exhausted": result.exhausted,
        "notes": [*result.notes, *notes_after],
        "skipped": [s.to_dict() for s in result.skipped],
        "shortfall_bytes": result.shortfall_bytes,
        "source": source.label,
        "run_id": record.id if record is not None else None,
        "profile": str(profile.path) if profile.path else None,
        "applied": applied,
    }
    if len(sources) > 1:
        payload["sources"] = [
            {"source": s.label, "cause": d.get("cause"), "rank": d.get("rank"), "host": d.get("host") or d.get("node")}
            for s, d in zip(sources, diagnoses)
        ]
    if as_json:
        console.print(json.dumps(payload, indent=2, default=str))
    else:
        _render(console, payload, result, profile, diag, sources, diagnoses, chosen_index, cwd)
    console.flush()

    if rerun and applied is not None:
        rerun_status = _relaunch(console, record, Path(applied["path"]), allow_semantic, store)
        return rerun_status
    if rerun and applied is None:
        return ExitStatus.NEGATIVE
    return ExitStatus.OK if result.suggestions else ExitStatus.NEGATIVE


# -- sources ----------------------------------------------------------------------------------

def _sources(targets: Sequence[str], logs: Sequence[str], store: Any, stdin: TextIO, cwd: Path) -> list[Source]:
    sources: list[Source] = []
    for target in targets:
        if target == "-":
            sources.append(Source("<stdin>", text=stdin.read()))
        else:
            record = store.load(target)
            sources.append(Source(f"run {record.id}", record=record))
    for log in logs:
        if log == "-":
            sources.append(Source("<stdin>", text=stdin.read()))
            continue
        path = cwd / log
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{log}: cannot read log: {exc.strerror}") from None
        sources.append(Source(str(log), text=data.decode("utf-8", errors="replace")))
    if not sources:
        record = _latest(store)
        if record is None:
            raise InputError(
                f"no run records in {store.root}: run the job with `gpudoc run`, or pass a log "
                "with --log FILE (or - for stdin)"
            )
        sources.append(Source(f"run {record.id}", record=record))
    return sources


def _latest(store: Any) -> Any:
    """The most recently started run.

    Run ids sort by the second only (their suffix is random), so among runs started within the
    newest second (a retry chain), a parent comes before its child, then the job's own start
    time (its processes' create_time) decides.
    """
    ids = store.ids()
    if not ids:
        return None
    newest = [store.load(run_id) for run_id in ids if run_id[:15] == ids[-1][:15]]
    parents = {r.parent for r in newest}

    def key(record):
        starts = [p.get("create_time") or 0 for p in (record.pids or []) if isinstance(p, dict)]
        return (record.id not in parents, min(starts) if starts else 0.0)

    return max(newest, key=key)


def _diagnose(source: Source, store: Any) -> dict:
    if source.record is not None:
        diag = record_diagnosis(source.record, store)
        if diag:
            return dict(diag)
        if source.record.status == "running":
            return {"cause": None, "summary": f"run {source.record.id} is still running (or its launcher died)"}
        cause = source.record.cause or ("ok" if source.record.exit_code == 0 else "error")
        return {"cause": cause, "exit_code": source.record.exit_code, "summary": "the run left no log to read"}
    from gpudoc.diagnose import diagnose_text

    return diagnose_text(source.text or "").to_dict()


def _first_failure(sources: list[Source], diagnoses: list[dict], store: Any) -> tuple[int, dict]:
    """Across several records or logs (one job, many nodes): the first real failure, and its
    diagnosis (which then names the other failures as consequences)."""
    if len(sources) == 1:
        return 0, diagnoses[0]
    from gpudoc.diagnose import diagnose_many

    labels = [f"{s.label}" if [x.label for x in sources].count(s.label) == 1 else f"{s.label} #{i + 1}"
              for i, s in enumerate(sources)]
    items = [(label, _text_of(s, store), getattr(s.record, "exit_code", None)) for label, s in zip(labels, sources)]
    picked = diagnose_many(items)
    index = labels.index(picked.node) if picked.node in labels else 0
    if not _text_of(sources[index], store):
        return index, diagnoses[index]  # a record without a log: its own stored diagnosis
    return index, picked.to_dict()


def _text_of(source: Source, store: Any) -> str:
    if source.text is not None:
        return source.text
    log = store.log_path(source.record.id)
    return log.read_bytes().decode("utf-8", errors="replace") if log.is_file() else ""


# -- profile and facts ------------------------------------------------------------------------

def _profile(name: str | None, record: Any, cwd: Path) -> Profile:
    if name:
        return load_profile(name, cwd=cwd)
    path = ((record.profile or {}).get("path") if record is not None else None)
    if path:
        candidate = Path(path)
        if not candidate.is_absolute() and record is not None:
            candidate = Path(record.cwd) / candidate
        if candidate.is_file():
            return load_profile_file(candidate, cwd=cwd)
    return load_profile(None, cwd=cwd)


def _local_facts(record: Any) -> Any:
    """Facts of this machine for the rungs that care (bf16 support, host RAM, allocator name).

    Optional: when the facts layer cannot answer, the ladder works from the profile alone.
    """
    try:
        from gpudoc.facts.gather import gather_facts

        facts = gather_facts(deep=False)
    except Exception:  # noqa: BLE001 - facts only refine the suggestions
        return None
    try:
        from gpudoc.facts.torch_probe import alloc_env_name

        name = alloc_env_name(job_python(record))
    except Exception:  # noqa: BLE001
        name = None
    if name:
        from gpudoc.facts.model import TorchFacts

        torch = facts.torch or TorchFacts(python=job_python(record), ok=True)
        facts = replace(facts, torch=replace(torch, alloc_env_name=name))
    return facts


# -- apply / rerun ----------------------------------------------------------------------------

def _covers(suggestion: Suggestion, result: LadderResult) -> bool:
    return (
        suggestion.expected_saving_bytes is not None
        and result.shortfall_bytes is not None
        and suggestion.expected_saving_bytes >= result.shortfall_bytes
    )


def _clean_command(diag: dict) -> str:
    gpu = diag.get("gpu_index")
    return f"`gpudoc clean --gpus {gpu}`" if gpu is not None else "`gpudoc clean`"


def _relaunch(console: Console, record: Any, profile_path: Path, allow_semantic: bool, store: Any) -> int:
    """Relaunch the recorded command under the new profile, as a new run linked to the old one."""
    command = list(record.command or [])
    if not command:
        raise UsageError(f"run {record.id} recorded no command to relaunch")
    cwd = Path(record.cwd) if record.cwd and Path(record.cwd).is_dir() else Path.cwd()
    console.print(f"Relaunching: gpudoc run -p {profile_path} -- {' '.join(command)}")
    console.flush()
    try:
        from gpudoc.commands.run import RunOptions, launch_once
        from gpudoc.profiles.loader import load_profile_file as _load
    except ImportError:
        argv = [sys.executable, "-m", "gpudoc", "run", "-p", str(profile_path), "--", *command]
        return subprocess.call(argv, cwd=cwd)
    options = RunOptions(command=command, profile=str(profile_path), allow_semantic=allow_semantic)
    status, _new = launch_once(options, _load(profile_path, cwd=cwd), console=console, environ=dict(os.environ),
                               cwd=cwd, store=store, parent=record.id)
    return int(status)


# -- rendering --------------------------------------------------------------------------------

def _render(console, payload, result: LadderResult, profile: Profile, diag, sources, diagnoses, chosen_index, cwd) -> None:
    style = console.style
    if len(sources) > 1:
        console.print(f"Looked at {len(sources)} records/logs; the first real failure is in {sources[chosen_index].label}:")
        for i, (s, d) in enumerate(zip(sources, diagnoses)):
            if i != chosen_index:
                console.print(style(f"  {s.label}: {d.get('cause')} (a consequence)", "dim"))
    console.print(explain(diag))
    summary = (diag.get("summary") or "").strip()
    if summary and diag.get("cause") == "gpu_oom" and payload["diagnosis"].get("requested_bytes") is None:
        console.print(style(f"  {summary}", "dim"))
    if result.shortfall_bytes:
        console.print(style(f"Short by at least {format_bytes(result.shortfall_bytes)}.", "dim"))
    if not profile.path:
        console.print(style("No profile: pass -p PROFILE (or write ./gpudoc.toml) so gpudoc knows the job's knobs.", "dim"))
    if result.suggestions:
        console.print("")
        console.print(style("Next, in order:", "bold"))
        env_now = dict(profile.env)
        for number, suggestion in enumerate(result.suggestions, start=1):
            _render_suggestion(console, number, suggestion, env_now)
        console.print("")
        first = result.first_profile_change()
        if payload["applied"]:
            applied = payload["applied"]
            line = f"Wrote {applied['rung']} to {applied['path']}"
            if applied.get("backup"):
                line += f" (backup: {applied['backup']})"
            console.print(style(line, "green"))
        elif first is not None:
            where = target_path(profile, cwd)
            console.print(f"Apply the first change with `gpudoc fix --apply` (writes {where}), or `gpudoc fix --rerun` to apply and relaunch.")
    if result.semantic_held_back:
        console.print("")
        console.print(style("Held back (they change the experiment; --allow-semantic to propose them):", "yellow"))
        env_now = dict(profile.env)
        for suggestion in result.semantic_held_back:
            diff = "; ".join(knob_diff_lines(suggestion, current_env=env_now))
            console.print(f"  {suggestion.rung}: {diff}")
    for note in payload["notes"]:
        if result.semantic_held_back and note.startswith("held back"):
            continue  # already listed above
        console.print(style(f"Note: {note}", "dim"))


def _render_suggestion(console: Console, number: int, suggestion: Suggestion, env_now: dict) -> None:
    tag = " (semantic)" if suggestion.semantic else ""
    console.print(f"{number}. {console.style(suggestion.rung, 'bold')}{tag}  — {saving_text(suggestion)}")
    for line in knob_diff_lines(suggestion, current_env=env_now):
        console.print(f"     {line}")
    console.print(console.style(f"     {suggestion.why}", "dim"))
