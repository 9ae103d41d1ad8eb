"""The results `gpudoc check` shows (its findings, its catalogue), `gpudoc estimate`'s, and any
command's failure once ``--json`` was asked: what `gpudoc check` imports of ``gpudoc.results``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from gpudoc.errors import ExitStatus
from gpudoc.findings import Finding, overall_status, summarize

if TYPE_CHECKING:
    from gpudoc.estimate import Estimate
    from gpudoc.facts.model import Facts


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
