"""What a check says: a severity, a title, the detail, and the exact remedy."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field


class Severity(str, enum.Enum):
    OK = "ok"
    INFO = "info"
    SKIP = "skip"  # not applicable here
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"  # the check itself crashed

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def is_problem(self) -> bool:
        return self in (Severity.FAIL, Severity.ERROR)


_RANK = {
    Severity.OK: 0,
    Severity.SKIP: 0,
    Severity.INFO: 1,
    Severity.WARN: 2,
    Severity.FAIL: 3,
    Severity.ERROR: 3,
}


@dataclass(frozen=True)
class Finding:
    """One line of a doctor's report.

    ``remedy`` is a command or an exact setting, never advice in prose: every non-ok finding has
    one. ``affects`` names what the finding is about (GPU indexes, PIDs, variable names);
    ``holders``, who holds what it is about (a GPU's memory: each process, as the detail words it),
    for a reader that shows them apart from the detail (`run --wait`'s status line). The JSON keeps
    the SPEC's keys: the holders are in the detail there.
    """

    id: str
    severity: Severity
    title: str
    detail: str = ""
    remedy: str | None = None
    affects: tuple[str, ...] = field(default_factory=tuple)
    holders: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "severity": self.severity.value,
            "title": self.title,
            "detail": self.detail,
            "remedy": self.remedy,
            "affects": list(self.affects),
        }


def summarize(findings: list[Finding] | tuple[Finding, ...]) -> dict[str, int]:
    """Counts per severity, every severity present (zeros included) so JSON consumers can rely on keys."""
    counts = {s.value: 0 for s in Severity}
    for f in findings:
        counts[f.severity.value] += 1
    return counts


def overall_status(findings: Iterable[Finding], *, strict: bool = False) -> str:
    """``ok``, ``warn`` or ``fail`` for the whole report."""
    if any(f.severity.is_problem for f in findings):
        return "fail"
    if any(f.severity is Severity.WARN for f in findings):
        return "fail" if strict else "warn"
    return "ok"
