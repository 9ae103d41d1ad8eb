"""What `gpudoc fix` reads, and which failure it fixes: run records (every node's record of one
job's attempt), log files or stdin, each diagnosed; across several, the first real failure."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from gpudoc.commands.retry import record_diagnosis
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.diagnose.lines import is_log_text
from gpudoc.errors import InputError
from gpudoc.runs.attempts import job_records
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from gpudoc.runs.tail import TAIL_BYTES, read_tail


@dataclass
class Source:
    """One thing to diagnose: a run record (with its log) or a log text."""

    label: str
    record: RunRecord | None = None
    text: str | None = None
    node: str | None = None  # which node of a multi-node job (records only)


def read_sources(targets: Sequence[str], logs: Sequence[str], store: RunStore, stdin: TextIO,
                 cwd: Path) -> list[Source]:
    """RUN_IDs and ``-`` (stdin), then ``--log`` files; with neither, the latest run (with every
    node's record of its attempt when it was one node of a job)."""
    sources: list[Source] = []
    for target in targets:
        if target == "-":
            sources.append(Source("<stdin>", text=_log_text("<stdin>", stream_tail(stdin))))
        else:
            record = store.load(target)
            sources.append(Source(f"run {record.id}", record=record))
    for log in logs:
        if log == "-":
            sources.append(Source("<stdin>", text=_log_text("<stdin>", stream_tail(stdin))))
            continue
        sources.append(Source(str(log), text=_log_text(str(log), _read_log(cwd / log, str(log)))))
    if not sources:
        latest = store.latest()
        if latest is None:
            raise InputError(
                f"no run records in {store.root}: run the job with `gpudoc run`, or pass a log "
                "with --log FILE (or - for stdin)"
            )
        if latest.trial_of:
            # A tune's trial runs out of memory on purpose: its OOM answers the search, not the job.
            raise InputError(f"the latest run {latest.id} is a trial of `gpudoc tune` {latest.trial_of}, whose "
                             "out-of-memory is the search's answer: `gpudoc fix RUN_ID` names the run to diagnose")
        # One node's record of a multi-node job rarely holds the cause (it sees a timeout, or
        # gpudoc ended it because another node failed): read every node's record of this attempt.
        members = job_records(store, latest.job_id, attempt_of=latest) if latest.job_id else [latest]
        sources.extend(Source(f"run {r.id}", record=r) for r in (members or [latest]))
    _label_nodes(sources)
    return sources


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _read_log(path: Path, name: str) -> str:
    """The log's tail, after the evidence of everything before it (a failure that a flood of
    output pushed out of the tail): bounded memory, one streaming pass, whatever the size."""
    from gpudoc.diagnose.gate import evidence_before

    try:
        with open(path, "rb") as handle:
            if handle.read(2) in _UTF16_BOMS:
                # Windows PowerShell's `>` and Tee-Object write UTF-16: decoded as a stream, tail only.
                with open(path, encoding="utf-16", errors="replace") as text:
                    return stream_tail(text)
            size = handle.seek(0, os.SEEK_END)
            earlier = evidence_before(handle, max(size - TAIL_BYTES, 0)) if size > TAIL_BYTES else ""
    except OSError as exc:
        raise InputError(f"{name}: cannot read log: {exc.strerror}", file=name) from None
    return earlier + read_tail(path)


def _log_text(name: str, text: str) -> str:
    """A log given by the user must hold log lines: an empty or binary file is said, never "no failure"."""
    if not is_log_text(text):
        what = "it is empty" if not text.strip() else "no text lines in it (a binary file?)"
        raise InputError(f"{name}: nothing recognisable in it: {what}", file=name)
    return text


def stream_tail(stream: TextIO, limit: int = TAIL_BYTES) -> str:
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
    records = [(s, s.record) for s in sources if s.record is not None]
    hosts = [r.host for _, r in records]
    keys = [(r.host, r.node_rank) for _, r in records]
    for source, record in records:
        host, rank = record.host, record.node_rank
        label = host or "unknown host"
        if hosts.count(host) > 1 and rank is not None:
            label += f" node {rank}"
        if keys.count((host, rank)) > 1 or (hosts.count(host) > 1 and rank is None):
            label += f" (run {record.id})"
        source.node = label


def diagnose_source(source: Source, store: RunStore) -> Diagnosis:
    if source.record is not None:
        record = source.record
        found = record_diagnosis(record, store)
        if found is not None:
            return found
        if record.status == "running":
            return Diagnosis.still_running(record.id)
        return Diagnosis.without_log(record.cause or ("ok" if record.exit_code == 0 else "error"), record.exit_code)
    from gpudoc.diagnose.text import diagnose_text

    return diagnose_text(source.text or "")


def first_failure(sources: list[Source], diagnoses: list[Diagnosis], store: RunStore) -> tuple[int, Diagnosis]:
    """Across several records or logs (one job, many nodes): the first real failure, and its
    diagnosis (which then names the other failures as consequences)."""
    if len(sources) == 1:
        return 0, _with_node(diagnoses[0], sources[0])
    from gpudoc.diagnose.text import diagnose_many

    names = [s.node or s.label for s in sources]
    labels = [name if names.count(name) == 1 else f"{name} #{i + 1}" for i, name in enumerate(names)]
    items = [(label, _text_of(s, store), s.record.exit_code if s.record else None) for label, s in zip(labels, sources)]
    picked = diagnose_many(items, [s.record.only_worker_rank if s.record else None for s in sources])
    index = labels.index(picked.node) if picked.node in labels else 0
    own = diagnoses[index]
    if not _text_of(sources[index], store):
        picked = own  # a record without a log: its own stored diagnosis
    elif own.cause == picked.cause:
        # The record's own diagnosis knew the job's PIDs (the other processes on the GPU are
        # then really others); keep it and add what only the comparison knows.
        picked = replace(own, summary=picked.summary or own.summary)
    return index, _with_node(picked, sources[index], label=labels[index])


def _with_node(diag: Diagnosis, source: Source, *, label: str | None = None) -> Diagnosis:
    """The diagnosis with where it happened: the node, its host and node rank, the run."""
    record = source.record
    if record is None:
        return replace(diag, node=label or diag.node)
    return replace(diag, node=source.node or label, host=record.host, node_rank=record.node_rank,
                   run_id=record.id, job_id=record.job_id)


def role(diag: Diagnosis) -> str:
    """What another node's failure was to the first one."""
    if diag.cause == "ok":
        return "ok"
    if diag.cause is None:
        return "running"
    return "consequence"


def _text_of(source: Source, store: RunStore) -> str:
    if source.text is not None:
        return source.text
    return store.log_tail(source.record.id) if source.record is not None else ""
