"""The results of `gpudoc runs` (list, show, diff, prune) and of `gpudoc run` (dry run, the run's end)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from gpudoc.errors import ExitStatus

if TYPE_CHECKING:
    from gpudoc.runs.record import RunRecord


@dataclass(frozen=True)
class RunsResult:
    """`gpudoc runs`: the records, oldest first, each with its live status."""

    command: ClassVar[str] = "runs"
    runs_dir: str
    records: tuple[RunRecord, ...]
    live_status: tuple[str, ...]  # per record: its status, "lost" when its launcher is gone
    # Per record id, the run its knobs are compared with (its parent, else the run before it),
    # found even when the listing leaves that run out.
    before: Mapping[str, RunRecord] = field(default_factory=dict)
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
        projects = [table.json_body() for table in self.tables]
        # `runs` as `gpudoc runs --json` has it (SPEC: runs' own key), every project's; `projects` groups them.
        return {"runs": [run for project in projects for run in project["runs"]], "projects": projects}


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
    skipped: int = 0  # lines of gpu.csv that were not samples (corrupted bytes)
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        doc = self.record.to_dict()
        doc["status"] = self.live_status
        return {"run": doc, "timeline": {"start": self.start, "end": self.end, "skipped_lines": self.skipped,
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
    edits: tuple[tuple[str, Any, Any], ...]  # "PATH KEY" -> the value each run read there
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
    removed_unlisted: tuple[str, ...] = ()  # file states kept before edits no run lists (their paths)
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"runs_dir": self.runs_dir, "removed": list(self.removed), "kept_live": list(self.kept_live),
                "total": self.total, "dry_run": self.dry_run, "removed_unlisted": list(self.removed_unlisted)}


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
    # Where each knob goes: {"knob", "file", "key", "old", "new", "added"} ("file" is "command"
    # for the job's own flags), changed or not. With no profile, each knob read from the job also has
    # "where" (``argv:--flag``, ``file:PATH:key``, ``default:FRAMEWORK``, with "file" None).
    bindings: tuple[dict[str, Any], ...] = ()
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"dry_run": True, "argv": list(self.argv), "env_set": dict(self.env_set),
                "file_edits": [dict(e) for e in self.file_edits], "bindings": [dict(b) for b in self.bindings],
                "notes": list(self.notes)}


@dataclass(frozen=True)
class RunResult:
    """`gpudoc run`, after the job ended: its record."""

    command: ClassVar[str] = "run"
    record: RunRecord
    exit_code: int
    log_path: str
    killed_by: int | None = None  # the signal that ended the job, when one did
    interrupted_by: int | None = None  # the signal the user sent gpudoc (Ctrl-C, SIGTERM)
    retries_left: int = 0  # --retry-oom relaunches still allowed after this attempt

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def relaunch_follows(self) -> bool:
        """A GPU OOM with --retry-oom relaunches left: gpudoc climbs the ladder itself (it says so
        when no rung is left), so the summary sends the user to no `gpudoc fix`."""
        return self.retries_left > 0 and self.record.oom_retryable

    def json_body(self) -> dict[str, Any]:
        return {"run": self.record.to_dict(), "log": self.log_path}
