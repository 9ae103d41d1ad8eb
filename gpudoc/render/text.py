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
    renderer = _RENDERERS.get(type(result).__module__)
    if renderer is not None and renderer not in sys.modules:
        importlib.import_module(renderer)  # registers its renderers
        text(result, console)
        return
    raise NotImplementedError(f"no text rendering for {type(result).__name__}")


# The other commands' renderers, by the results module whose types they show: registered when
# imported, the first time one of those results is shown. `gpudoc check` starts often and shows
# only the results here, so it pays for neither the other renderers nor their types (~10 ms).
_RENDERERS = {
    "gpudoc.results.runs": "gpudoc.render.runs_text",
    "gpudoc.results.profile": "gpudoc.render.profile_text",
    "gpudoc.results.fix": "gpudoc.render.fix_text",
    "gpudoc.results.restore": "gpudoc.render.restore_text",
    "gpudoc.results.tune": "gpudoc.render.tune_text",
}


def knob_word(value: object) -> str:
    """A knob's value as every command writes it: booleans as the profile spells them (``true``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@text.register
def _check(result: CheckResult, console: Console) -> None:
    from gpudoc.render.findings_text import render_findings

    source = result.facts.source
    header = ("gpudoc check: no GPU facts (NVML did not start)" if source == "none"
              else f"gpudoc check: facts from {source}")
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
