"""The results of `gpudoc profile list|show|new`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gpudoc.errors import ExitStatus


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
    kept: str | None = None  # --force: where the profile it replaced is kept
    exit_code: int = ExitStatus.OK
    status: str = "ok"

    def json_body(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "kept": self.kept}
