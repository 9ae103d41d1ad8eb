"""`gpudoc check`: gather facts once, run the catalogue, render the findings, return the exit status."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpudoc.checks import CATALOGUE, run_checks, select
from gpudoc.checks._common import has_profile, parse_gpu_list
from gpudoc.errors import ExitStatus
from gpudoc.facts.torch_probe import installed_torch_version
from gpudoc.findings import Finding, Severity
from gpudoc.job.interpreter import target_python as target_job_python
from gpudoc.profiles.model import Profile
from gpudoc.render.show import show
from gpudoc.results import CatalogueResult, CheckResult
from gpudoc.workspace import Workspace


def exit_status(findings: Iterable[Finding], *, strict: bool = False) -> int:
    """0 ok/warn (1 with ``--strict`` when anything warns), 1 any fail or error."""
    findings = list(findings)
    if any(f.severity.is_problem for f in findings):
        return ExitStatus.NEGATIVE
    if strict and any(f.severity is Severity.WARN for f in findings):
        return ExitStatus.NEGATIVE
    return ExitStatus.OK


def target_python(python: str | None, environ: Mapping[str, str]) -> str:
    """The interpreter the job will run: ``--python`` (or the one the profile's latest run ran),
    else what ``python3`` (or ``python``) names on this environment's PATH, by the one rule the
    launcher uses; else gpudoc's own."""
    return python or target_job_python(["python3"], environ) or target_job_python(["python"], environ) \
        or sys.executable


def check(
    ws: Workspace,
    *,
    profile_name: str | None = None,
    as_json: bool = False,
    strict: bool = False,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    gpus: str | None = None,
    snapshots: Iterable[str | Path] = (),
    deep: bool = False,
    list_checks: bool = False,
    python: str | None = None,
) -> int:
    if list_checks:
        return show(CatalogueResult(tuple((c.id, c.title) for c in CATALOGUE)), ws.console, as_json=as_json)
    only, skip = tuple(only), tuple(skip)
    select(only, skip)  # a typo in --only/--skip is a usage error before any slow work
    indexes = parse_gpu_list(gpus) if gpus is not None else None

    profile = ws.load_profile(profile_name)
    python = target_python(python or ws.ran_python(profile), ws.environ)
    facts = ws.gather(snapshot_files=[ws.cwd / s for s in snapshots], deep=deep, python=python)

    torch_version = alloc_name = None
    if facts.torch is None and not facts.source.startswith("snapshot"):
        from gpudoc.facts.torch_probe import alloc_env_name_for

        torch_version = installed_torch_version(python)
        alloc_name = alloc_env_name_for(torch_version) if torch_version else None
    findings = run_checks(
        facts, profile, only=only, skip=skip, gpus=indexes, estimate=ws.estimate(profile, facts, python=python),
        alloc_env_name=alloc_name, torch_version=torch_version,
        profile_label=_label(profile),
    )
    result = CheckResult(facts=facts, findings=tuple(findings), exit_code=exit_status(findings, strict=strict),
                         profile=profile.to_dict() if has_profile(profile) else None, profile_label=_label(profile))
    return show(result, ws.console, as_json=as_json)


def _label(profile: Profile) -> str | None:
    return profile.name if has_profile(profile) else None
