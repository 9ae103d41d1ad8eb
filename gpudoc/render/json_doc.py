"""The versioned JSON envelope every ``--json`` command output shares."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpudoc import __version__
from gpudoc.findings import Finding, overall_status, summarize

if TYPE_CHECKING:
    from gpudoc.facts.model import Facts

SCHEMA_VERSION = 1


def envelope(command: str, *, status: str, exit_code: int, **body: Any) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "gpudoc_version": __version__,
        "command": command,
        "status": status,
        "exit_code": int(exit_code),
        **body,
    }


def check_document(facts: Facts, findings: list[Finding], *, exit_code: int, profile: dict | None = None) -> dict:
    """``gpudoc check --json``: the facts (readable back with ``--snapshot``), the findings, the counts.

    ``status`` describes the findings (``warn`` stays ``warn`` under ``--strict``); ``exit_code`` is
    what the process exits with.
    """
    doc = envelope(
        "check",
        status=overall_status(findings),
        exit_code=exit_code,
        facts=facts.to_dict(),
        findings=[f.to_dict() for f in findings],
        summary=summarize(findings),
    )
    if profile is not None:
        doc["profile"] = profile
    return doc


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, default=str)
