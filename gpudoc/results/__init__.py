"""What each command found, as typed objects: commands build them, ``gpudoc.render`` shows them.

A command's flow ends by handing its result to ``gpudoc.render.show``, which prints it as text or
as the one versioned JSON envelope (``schema_version``, ``gpudoc_version``, ``command``,
``status``, ``exit_code``, then the command's own keys from ``json_body``). Nothing here prints.

``status`` says the outcome in one word: ``ok``; ``warn`` (check: warnings only); ``fail`` (the
command's answer is negative: a failed check, an estimate that does not fit, no suggestion);
``error`` (gpudoc could not do what was asked); for ``run``, the run's own status (``ok``,
``failed``, ``interrupted``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from gpudoc.errors import ExitStatus
from gpudoc.findings import Finding, overall_status, summarize

if TYPE_CHECKING:
    from gpudoc.diagnose.diagnosis import Diagnosis
    from gpudoc.estimate import Estimate
    from gpudoc.facts.model import Facts
    from gpudoc.ladder.model import LadderResult
    from gpudoc.runs.record import RunRecord


def status_of(exit_code: int) -> str:
    """The status word of a command whose exit code says it all."""
    if exit_code == ExitStatus.OK:
        return "ok"
    if exit_code == ExitStatus.NEGATIVE:
        return "fail"
    return "error"


@dataclass(frozen=True)
class CheckResult:
    """`gpudoc check`: the facts (readable back with ``--snapshot``) and the findings."""

    command: ClassVar[str] = "check"
    facts: Facts
    findings: tuple[Finding, ...]
    exit_code: int
    profile: dict[str, Any] | None = None  # the resolved profile, when one was used
    profile_label: str | None = None

    @property
    def status(self) -> str:
        # Describes the findings: `warn` stays `warn` under --strict; exit_code says what --strict did.
        return overall_status(self.findings)

    def json_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"facts": self.facts.to_dict(), "findings": [f.to_dict() for f in self.findings],
                                "summary": summarize(self.findings)}
        if self.profile is not None:
            body["profile"] = self.profile
        return body


@dataclass(frozen=True)
class CatalogueResult:
    """`gpudoc check --list-checks`: every check id with its title."""

    command: ClassVar[str] = "check"
    checks: tuple[tuple[str, str], ...]  # (id, title)
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"checks": [{"id": cid, "title": title} for cid, title in self.checks]}


@dataclass(frozen=True)
class EstimateResult:
    """`gpudoc estimate`: the peak, its breakdown and the largest micro batch that fits."""

    command: ClassVar[str] = "estimate"
    estimate: Estimate
    profile_name: str
    gpu_from: str | None
    exit_code: int

    @property
    def status(self) -> str:
        return status_of(self.exit_code)

    def json_body(self) -> dict[str, Any]:
        return {"profile": self.profile_name, **self.estimate.to_dict(), "gpu_total_from": self.gpu_from}


@dataclass(frozen=True)
class RunsResult:
    """`gpudoc runs`: the records, oldest first, each with its live status."""

    command: ClassVar[str] = "runs"
    runs_dir: str
    records: tuple[RunRecord, ...]
    live_status: tuple[str, ...]  # per record: its status, "lost" when its launcher is gone
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        docs = []
        for record, status in zip(self.records, self.live_status):
            doc = record.to_dict()
            doc["status"] = status
            docs.append(doc)
        return {"runs_dir": self.runs_dir, "runs": docs}


@dataclass(frozen=True)
class AllRunsResult:
    """`gpudoc runs --all`: every project's runs, from the per-user index."""

    command: ClassVar[str] = "runs"
    tables: tuple[RunsResult, ...]
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"projects": [table.json_body() for table in self.tables]}


@dataclass(frozen=True)
class RunShowResult:
    """`gpudoc runs show RUN`: one run's record and its memory over time per GPU."""

    command: ClassVar[str] = "runs show"
    record: RunRecord
    live_status: str
    start: float | None  # the timeline's first and last sample (epoch seconds)
    end: float | None
    used: dict[int, list[int | None]]  # GPU index -> highest use per time bucket
    total: dict[int, int]  # GPU index -> capacity
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        doc = self.record.to_dict()
        doc["status"] = self.live_status
        return {"run": doc, "timeline": {"start": self.start, "end": self.end,
                                         "gpus": {str(g): {"used_bytes": list(v), "total_bytes": self.total.get(g)}
                                                  for g, v in sorted(self.used.items())}}}


@dataclass(frozen=True)
class RunsDiffResult:
    """`gpudoc runs diff A B`: what changed from run A to run B. Each change is (what, A's, B's)."""

    command: ClassVar[str] = "runs diff"
    a: str
    b: str
    knobs: tuple[tuple[str, Any, Any], ...]
    env: tuple[tuple[str, Any, Any], ...]
    edits: tuple[tuple[str, Any, Any], ...]  # file -> the changes each run's bindings wrote there
    outcome: tuple[tuple[str, Any, Any], ...]  # status, cause, exit code, duration, peak
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        def part(rows: tuple[tuple[str, Any, Any], ...]) -> dict[str, Any]:
            return {what: {"a": old, "b": new} for what, old, new in rows}

        return {"a": self.a, "b": self.b, "knobs": part(self.knobs), "env": part(self.env),
                "edits": part(self.edits), "outcome": part(self.outcome)}


@dataclass(frozen=True)
class PruneResult:
    """`gpudoc runs prune`: the runs removed (or that would be, with --dry-run) and those kept."""

    command: ClassVar[str] = "runs prune"
    runs_dir: str
    removed: tuple[str, ...]
    kept_live: tuple[str, ...]  # old enough to go, but of a running chain
    total: int  # runs before pruning
    dry_run: bool = False
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"runs_dir": self.runs_dir, "removed": list(self.removed), "kept_live": list(self.kept_live),
                "total": self.total, "dry_run": self.dry_run}


@dataclass(frozen=True)
class ProfileListResult:
    """`gpudoc profile list`: the profiles visible from here."""

    command: ClassVar[str] = "profile list"
    profiles: tuple[dict[str, Any], ...]  # {"name", "origin", "path", "description"}
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"profiles": list(self.profiles)}


@dataclass(frozen=True)
class ProfileShowResult:
    """`gpudoc profile show`: one profile after ``extends``."""

    command: ClassVar[str] = "profile show"
    profile: dict[str, Any]
    shipped: bool
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"profile": self.profile}


@dataclass(frozen=True)
class ProfileNewResult:
    """`gpudoc profile new`: the file written."""

    command: ClassVar[str] = "profile new"
    path: str
    name: str
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name}


@dataclass(frozen=True)
class DryRunResult:
    """`gpudoc run --dry-run`: what would be launched, set and edited.

    The envelope's ``command`` key names gpudoc's command, so the job's resolved command line is
    ``argv`` here.
    """

    command: ClassVar[str] = "run"
    argv: tuple[str, ...]
    env_set: dict[str, str]
    file_edits: tuple[dict[str, str], ...]  # {"path", "diff"}
    notes: tuple[str, ...] = ()
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"dry_run": True, "argv": list(self.argv), "env_set": dict(self.env_set),
                "file_edits": [dict(e) for e in self.file_edits], "notes": list(self.notes)}


@dataclass(frozen=True)
class RunResult:
    """`gpudoc run`, after the job ended: its record."""

    command: ClassVar[str] = "run"
    record: RunRecord
    exit_code: int
    log_path: str
    killed_by: int | None = None  # the signal that ended the job, when one did
    interrupted_by: int | None = None  # the signal the user sent gpudoc (Ctrl-C, SIGTERM)

    @property
    def status(self) -> str:
        return self.record.status

    def json_body(self) -> dict[str, Any]:
        return {"run": self.record.to_dict(), "log": self.log_path}


@dataclass(frozen=True)
class NodeView:
    """One record or log that `fix` read, for a job that ran on several nodes."""

    source: str
    node: str | None
    host: str | None
    node_rank: int | None
    run_id: str | None
    cause: str | None
    rank: int | None
    gpu_index: int | None
    role: str  # first_failure | consequence | ok | running
    ended_by_gpudoc: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "node": self.node, "host": self.host, "node_rank": self.node_rank,
                "run_id": self.run_id, "cause": self.cause, "rank": self.rank, "gpu_index": self.gpu_index,
                "role": self.role}


@dataclass(frozen=True)
class FixResult:
    """`gpudoc fix`: the diagnosis, the ladder's proposal, and what was written."""

    command: ClassVar[str] = "fix"
    diagnosis: Diagnosis
    ladder: LadderResult
    source: str  # what was read: "run ID", a log path, "<stdin>"
    run_id: str | None
    job_id: str | None
    profile_path: str | None
    profile_env: dict[str, str]  # the profile's [env], to show what a rung changes from
    target_path: str  # where --apply writes
    exit_code: int
    applied: dict[str, Any] | None = None  # {"rung", "path", "backup"}
    notes: tuple[str, ...] = ()  # the ladder's notes and what apply did
    rerun: dict[str, Any] | None = None  # {"command", "parent"} of the relaunch
    nodes: tuple[NodeView, ...] = ()  # every record read, when a job ran on several nodes

    @property
    def status(self) -> str:
        return status_of(self.exit_code)

    def json_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "diagnosis": self.diagnosis.to_dict(),
            "suggestions": [s.to_dict() for s in self.ladder.suggestions],
            "semantic_held_back": [s.to_dict() for s in self.ladder.semantic_held_back],
            "exhausted": self.ladder.exhausted,
            "notes": list(self.notes),
            "skipped": [s.to_dict() for s in self.ladder.skipped],
            "shortfall_bytes": self.ladder.shortfall_bytes,
            "source": self.source,
            "run_id": self.run_id,
            "job_id": self.job_id,
            "profile": self.profile_path,
            "applied": self.applied,
        }
        if self.rerun is not None:
            body["rerun"] = self.rerun
        if self.nodes:
            body["sources"] = [n.to_dict() for n in self.nodes]
        return body


@dataclass(frozen=True)
class CleanPlan:
    """`gpudoc clean`, before it signals anything: this user's processes it would end, and the
    others it leaves alone (each with the command that would free it)."""

    gpus: tuple[int, ...]
    targets: tuple[dict[str, Any], ...]  # Target.to_dict(), plus "description"
    others: tuple[dict[str, Any], ...]  # GpuHolder.to_dict(), plus "description" and "remedy"


@dataclass(frozen=True)
class CleanResult:
    """`gpudoc clean`: the plan, what ending it came to, and how much memory came back."""

    command: ClassVar[str] = "clean"
    plan: CleanPlan | None  # None: the GPUs' processes could not be seen at all
    exit_code: int
    message: str | None = None  # why nothing (more) was done, when that is the news
    outcome: dict[str, Any] | None = None  # the signals' result: terminated, killed, freed_bytes, ...
    term_timeout_s: float | None = None
    note: str = ""

    @property
    def status(self) -> str:
        return status_of(self.exit_code)

    def json_body(self) -> dict[str, Any]:
        plan = self.plan
        return {"message": self.message, "gpus": list(plan.gpus) if plan and plan.gpus else None,
                "targets": [_without("description", t) for t in plan.targets] if plan else [],
                "others": [_without("description", o) for o in plan.others] if plan else [],
                "result": self.outcome, "note": self.note}


def _without(key: str, doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != key}


@dataclass(frozen=True)
class ErrorResult:
    """Any command that could not do what was asked, once ``--json`` was asked."""

    command: str
    exit_code: int
    message: str
    file: str | None = None
    key: str | None = None
    status: str = "error"

    def json_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "file": self.file, "key": self.key}}
