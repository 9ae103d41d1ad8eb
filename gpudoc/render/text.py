"""Results as text for a person at a terminal: one renderer per result type.

``text(result, console)`` dispatches on the result's type; JSON is ``gpudoc.render.show``'s.
Here: ``check``'s, ``estimate``'s and any failure's; the other commands' are in the modules
named in ``_RENDERERS``.
"""

from __future__ import annotations

import importlib
import sys
from functools import singledispatch
from typing import Any

from gpudoc.output import Console
from gpudoc.results import CatalogueResult, CheckResult, ErrorResult, EstimateResult


@singledispatch
def text(result: Any, console: Console) -> None:
    """The human rendering of a result."""
    if _import_renderers():
        text(result, console)  # registered now
        return
    raise NotImplementedError(f"no text rendering for {type(result).__name__}")


# The other commands' renderers, beside their results' modules, registered when imported: the
# first result of theirs to be shown imports them. `gpudoc check` starts often and shows only the
# results here, so it pays for neither those renderers nor those result types (~10 ms).
_RENDERERS = ("gpudoc.render.runs_text", "gpudoc.render.profile_text", "gpudoc.render.fix_text")


def _import_renderers() -> bool:
    """Import the renderers not imported yet; False when there were none left."""
    missing = [name for name in _RENDERERS if name not in sys.modules]
    for name in missing:
        importlib.import_module(name)
    return bool(missing)


@text.register
def _check(result: CheckResult, console: Console) -> None:
    from gpudoc.render.findings_text import render_findings

    header = f"gpudoc check: facts from {result.facts.source}"
    if result.profile_label:
        header += f", profile {result.profile_label}"
    console.print(console.style(header, "dim"))
    console.print()
    render_findings(list(result.findings), console)


@text.register
def _catalogue(result: CatalogueResult, console: Console) -> None:
    width = max((len(cid) for cid, _ in result.checks), default=0)
    for cid, title in result.checks:
        console.print(f"{cid.ljust(width)}  {title}")


@text.register
def _estimate(result: EstimateResult, console: Console) -> None:
    from gpudoc.estimate.render import render_estimate

    render_estimate(result.estimate, console, profile_name=result.profile_name, gpu_from=result.gpu_from)


@text.register
def _error(result: ErrorResult, console: Console) -> None:
    console.error(result.message)
