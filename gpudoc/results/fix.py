"""The results of `gpudoc fix` (with the nodes it read) and of `gpudoc clean`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from gpudoc.results.core import status_of

if TYPE_CHECKING:
    from gpudoc.diagnose.diagnosis import Diagnosis
    from gpudoc.ladder.model import LadderResult


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
    knob_places: dict[str, str] = field(default_factory=dict)  # a job read from its command: knob -> where
    applied: dict[str, Any] | None = None  # {"rung", "path", "backup"}; for a job: {"rung", "command", "files", "env"}
    notes: tuple[str, ...] = ()  # the ladder's notes and what apply did
    rerun: dict[str, Any] | None = None  # {"command", "parent"} of the relaunch
    nodes: tuple[NodeView, ...] = ()  # every record read, when a job ran on several nodes
    # What `--apply` writes for the next relaunch (``relaunch.NextPlan.to_dict``); None when nothing.
    next: dict[str, Any] | None = None

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
            "knob_places": dict(self.knob_places),
            "applied": self.applied,
            "next": self.next,
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
