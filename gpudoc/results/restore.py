"""`gpudoc restore`'s result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gpudoc.results.core import status_of


@dataclass(frozen=True)
class RestoreResult:
    """Each file of the chain: ``{"path", "action" (restore | remove | unchanged), "hand_edited",
    "from_sha256", "to_sha256", "edits": [{"run_id", "old_sha256", "new_sha256", "changes"}],
    "kept"}`` (``kept``: where a change by hand that ``--force`` overwrote is kept, else null)."""

    command: ClassVar[str] = "restore"
    run_id: str
    chain: tuple[str, ...]
    files: tuple[dict[str, Any], ...]
    exit_code: int
    dry_run: bool = False
    removed_backups: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return status_of(self.exit_code)

    def json_body(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "chain": list(self.chain), "dry_run": self.dry_run,
                "files": [dict(f) for f in self.files], "removed_backups": list(self.removed_backups)}
