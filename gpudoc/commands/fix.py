"""`gpudoc fix`: say what went wrong, propose the next rungs of the tuning ladder, apply, rerun.

Flow: sources (run records, log files, stdin) -> diagnosis -> profile -> ladder -> render ->
optionally write the first profile-changing rung and relaunch the recorded command.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gpudoc.commands.retry import job_torch_facts, record_diagnosis
from gpudoc.commands.run_options import RunOptions, relaunch_switches
from gpudoc.errors import ExitStatus, InputError, UsageError
from gpudoc.ladder import suggest, upward_result
from gpudoc.ladder.explain import complete_diagnosis, explain, knob_diff_lines, saving_text
from gpudoc.ladder.model import LadderResult, Suggestion
from gpudoc.output import Console
from gpudoc.profiles.edit import apply_changes, target_path
from gpudoc.profiles.loader import load_profile, load_profile_file
from gpudoc.profiles.model import Profile
from gpudoc.results import status_of
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import TAIL_BYTES, RunStore, read_tail
from gpudoc.units import format_bytes
from gpudoc.workspace import Workspace

if TYPE_CHECKING:
    from gpudoc.estimate import Estimate
    from gpudoc.facts.model import Facts


@dataclass
class Source:
    """One thing to diagnose: a run record (with its log) or a log text."""

    label: str
    record: RunRecord | None = None
    text: str | None = None
    diagnosis: Any = None
    node: str | None = None  # which node of a multi-node job (records only)


def fix(
    ws: Workspace,
    *,
    targets: Sequence[str] = (),
    logs: Sequence[str] = (),
    profile_name: str | None = None,
    apply: bool = False,
    rerun: bool = False,
    allow_semantic: bool = False,
    as_json: bool = False,
    facts: Facts | None = None,
    estimate: Estimate | None = None,
) -> int:
    """Diagnose, propose, and with ``apply``/``rerun`` act. 0 with a suggestion, 1 without."""
    console, store, cwd = ws.console, ws.store, ws.cwd
    sources = _sources(targets, logs, store, ws.stdin, cwd)
    diagnoses = [_diagnose(s, store) for s in sources]
    chosen_index, diag = _first_failure(sources, diagnoses, store)
    source = sources[chosen_index]
    record = source.record
    if rerun and record is None:
        raise UsageError("--rerun needs a run record (it relaunches the recorded command); give a RUN_ID, not a log")
    if rerun and len({s.record.id for s in sources if s.record is not None}) > 1:
        # One node's part alone would wait at the rendezvous for the others forever.
        raise UsageError(
            f"--rerun relaunches one run, but {len(sources)} runs were read (one job's nodes): use --apply, then "
            "start the job again on every node (srun ... gpudoc run ...)"
        )

    profile = _profile(profile_name, record, cwd)
    if facts is None and record is not None:
        # This machine's facts only describe the job when it ran here.
        facts = _local_facts(ws, record) if record.host == socket.gethostname() else job_torch_facts(record, ws.environ)
    history = ws.history(profile, upto=record)

    if diag.get("cause") == "ok" and record is not None:
        result = upward_result(profile, record, facts, estimate=estimate, history=history)
    else:
        result = suggest(diag, profile, facts, history, allow_semantic=allow_semantic, estimate=estimate)

    applied = None
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
        "job_id": getattr(record, "job_id", None),
        "profile": str(profile.path) if profile.path else None,
        "applied": applied,
    }
    relaunch = _rerun_options(record, Path(applied["path"]), allow_semantic) if rerun and applied else None
    if relaunch is not None:
        payload["rerun"] = {"command": ["gpudoc", *relaunch.to_argv()], "parent": record.id}
    if len(sources) > 1:
        payload["sources"] = [
            {
                "source": s.label,
                "node": s.node,
                "host": getattr(s.record, "host", None) or d.get("host"),
                "node_rank": getattr(s.record, "node_rank", None),
                "run_id": getattr(s.record, "id", None),
                "cause": d.get("cause"),
                "rank": d.get("rank"),
                "gpu_index": d.get("gpu_index"),
                "role": "first_failure" if i == chosen_index else _role(d),
            }
            for i, (s, d) in enumerate(zip(sources, diagnoses))
        ]
    answer = ExitStatus.OK if result.suggestions else ExitStatus.NEGATIVE
    if rerun and applied is None:
        answer = ExitStatus.NEGATIVE
    if as_json:
        # With --rerun the process then exits with the relaunched job's status; this document
        # describes fix's own answer.
        from gpudoc.render.json_doc import dumps, envelope  # noqa: PLC0415

        console.print(dumps(envelope("fix", status=status_of(answer), exit_code=answer, **payload)))
    else:
        _render(console, payload, result, profile, diag, sources, diagnoses, chosen_index, cwd)
    console.flush()

    if rerun and applied is not None:
        return _relaunch(ws, relaunch, record, quiet=as_json)
    return answer


# -- sources ----------------------------------------------------------------------------------

def _sources(targets: Sequence[str], logs: Sequence[str], store: RunStore, stdin: TextIO, cwd: Path) -> list[Source]:
    sources: list[Source] = []
    for target in targets:
        if target == "-":
            sources.append(Source("<stdin>", text=_stream_tail(stdin)))
        else:
            record = store.load(target)
            sources.append(Source(f"run {record.id}", record=record))
    for log in logs:
        if log == "-":
            sources.append(Source("<stdin>", text=_stream_tail(stdin)))
            continue
        path = cwd / log
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise InputError(f"{log}: cannot read log: {exc.strerror}") from None
        # Only the end: a failure is near it, and a log can be far larger than memory.
        sources.append(Source(str(log), text=read_tail(path)))
    if not sources:
        record = store.latest()
        if record is None:
            raise InputError(
                f"no run records in {store.root}: run the job with `gpudoc run`, or pass a log "
                "with --log FILE (or - for stdin)"
            )
        # One node's record of a multi-node job rarely holds the cause (it sees a timeout, or
        # gpudoc ended it because another node failed): read every node's record of this attempt.
        members = store.job_records(record.job_id, attempt_of=record) if record.job_id else [record]
        sources.extend(Source(f"run {r.id}", record=r) for r in (members or [record]))
    _label_nodes(sources)
    return sources


def _stream_tail(stream: TextIO, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` characters of a stream read to its end in chunks (bounded memory)."""
    tail = ""
    while True:
        chunk = stream.read(1 << 16)
        if not chunk:
            return tail
        tail = (tail + chunk)[-limit:]


def _label_nodes(sources: list[Source]) -> None:
    """Name each record's node as people know it: the host, with the engine's node rank when
    hosts repeat (containers, tests), and the run id when even that cannot tell them apart."""
    records = [s for s in sources if s.record is not None]
    hosts = [s.record.host for s in records]
    keys = [(s.record.host, s.record.node_rank) for s in records]
    for source in records:
        host, rank = source.record.host, source.record.node_rank
        label = host or "unknown host"
        if hosts.count(host) > 1 and rank is not None:
            label += f" node {rank}"
        if keys.count((host, rank)) > 1 or hosts.count(host) > 1 and rank is None:
            label += f" (run {source.record.id})"
        source.node = label


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
        return 0, _with_node(diagnoses[0], sources[0])
    from gpudoc.diagnose import diagnose_many

    names = [s.node or s.label for s in sources]
    labels = [name if names.count(name) == 1 else f"{name} #{i + 1}" for i, name in enumerate(names)]
    items = [(label, _text_of(s, store), getattr(s.record, "exit_code", None)) for label, s in zip(labels, sources)]
    picked = diagnose_many(items).to_dict()
    index = labels.index(picked["node"]) if picked.get("node") in labels else 0
    own = diagnoses[index]
    if not _text_of(sources[index], store):
        picked = dict(own)  # a record without a log: its own stored diagnosis
    elif own.get("cause") == picked.get("cause"):
        # The record's own diagnosis knew the job's PIDs (the other processes on the GPU are
        # then really others); keep it and add what only the comparison knows.
        picked = dict(own, summary=picked.get("summary") or own.get("summary"))
    return index, _with_node(picked, sources[index], label=labels[index])


def _with_node(diag: dict, source: Source, *, label: str | None = None) -> dict:
    """The diagnosis with where it happened: the node, its host and node rank, the run."""
    if source.record is None:
        return dict(diag, node=label or diag.get("node")) if label or diag.get("node") else dict(diag)
    record = source.record
    return dict(diag, node=source.node or label, host=record.host, node_rank=record.node_rank,
                run_id=record.id, job_id=record.job_id)


def _role(diag: dict) -> str:
    cause = diag.get("cause")
    if cause == "ok":
        return "ok"
    if cause is None:
        return "running"
    return "consequence"


def _text_of(source: Source, store: Any) -> str:
    if source.text is not None:
        return source.text
    return store.log_tail(source.record.id)


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


def _local_facts(ws: Workspace, record: RunRecord) -> Facts | None:
    """Facts of this machine for the rungs that care (bf16 support, host RAM, allocator name).

    Optional: when the facts layer cannot answer, the ladder works from the profile alone.
    """
    try:
        facts = ws.gather(deep=False)
    except Exception:  # noqa: BLE001 - facts only refine the suggestions
        return None
    job = job_torch_facts(record, ws.environ)
    if job is not None and job.torch is not None:
        torch = facts.torch or job.torch
        facts = replace(facts, torch=replace(torch, alloc_env_name=job.torch.alloc_env_name))
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


def _rerun_options(record: RunRecord, profile_path: Path, allow_semantic: bool) -> RunOptions:
    """The relaunch: the recorded command, as the user launched it (same switches), under the
    new profile."""
    command = list(record.command or [])
    if not command:
        raise UsageError(f"run {record.id} recorded no command to relaunch")
    switches = relaunch_switches(record.id, record.run_switches, record.argv)
    if allow_semantic:
        switches["allow_semantic"] = True
    return RunOptions(command=command, profile=str(profile_path), **switches)


def _relaunch(ws: Workspace, options: RunOptions, record: RunRecord, *, quiet: bool) -> int:
    """Launch it as a new run whose parent is the failed one; its exit status is fix's."""
    import shlex

    from gpudoc.commands.run import launch_once

    console = ws.console
    if record.cwd and Path(record.cwd).is_dir():
        ws = ws.moved_to(Path(record.cwd))
    line = f"Relaunching: gpudoc {shlex.join(options.to_argv())}"
    # With --json, stdout holds the one JSON object (the job's own output follows it there).
    if quiet:
        console.error(line)
    else:
        console.print(line)
    console.flush()
    profile = load_profile_file(Path(str(options.profile)), cwd=ws.cwd)
    status, _new = launch_once(options, profile, ws, parent=record.id)
    return int(status)


# -- rendering --------------------------------------------------------------------------------

def _render(console, payload, result: LadderResult, profile: Profile, diag, sources, diagnoses, chosen_index, cwd) -> None:
    style = console.style
    if len(sources) > 1:
        _render_nodes(console, diag, sources, diagnoses, chosen_index)
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


def _render_nodes(console: Console, diag: dict, sources, diagnoses, chosen_index: int) -> None:
    """Which node failed first, and the others as what followed from it."""
    chosen = sources[chosen_index]
    job = getattr(chosen.record, "job_id", None)
    where = [f"rank {diag['rank']}" if diag.get("rank") is not None else None,
             f"GPU {diag['gpu_index']}" if diag.get("gpu_index") is not None else None]
    detail = ", ".join(w for w in where if w)
    name = f"node {chosen.node}" if chosen.node else chosen.label
    run = f" (run {chosen.record.id})" if chosen.record is not None and chosen.record.id not in name else ""
    head = f"Job {job}: " if job else ""
    console.print(f"{head}looked at {len(sources)} records/logs; the first real failure is on {name}{run}"
                  + (f", {detail}" if detail else "") + f": {diag.get('cause')}.")
    for i, (source, d) in enumerate(zip(sources, diagnoses)):
        if i == chosen_index:
            continue
        other = f"node {source.node}" if source.node else source.label
        if source.record is not None and source.record.id not in other:
            other += f" (run {source.record.id})"
        role = _role(d)
        if role == "ok":
            tail = "finished"
        elif role == "running":
            tail = "still running (or its launcher died)"
        else:
            ended = getattr(source.record, "ended_by", None)
            tail = f"{d.get('cause')}: ended because of it" + (" (gpudoc ended it)" if ended else "")
        console.print(console.style(f"  {other}: {tail}", "dim"))


def _render_suggestion(console: Console, number: int, suggestion: Suggestion, env_now: dict) -> None:
    tag = " (semantic)" if suggestion.semantic else ""
    console.print(f"{number}. {console.style(suggestion.rung, 'bold')}{tag}  — {saving_text(suggestion)}")
    for line in knob_diff_lines(suggestion, current_env=env_now):
        console.print(f"     {line}")
    console.print(console.style(f"     {suggestion.why}", "dim"))
