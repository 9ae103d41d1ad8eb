"""Findings as text: grouped by topic, one dot-leader line each, remedies as commands, a verdict."""

from __future__ import annotations

import shutil
from typing import Iterable

from gpudoc.findings import Finding, Severity, summarize
from gpudoc.output import Console

MARKERS = {
    Severity.OK: ("ok", ("green",)),
    Severity.INFO: ("info", ("cyan",)),
    Severity.SKIP: ("skip", ("dim",)),
    Severity.WARN: ("warn", ("yellow",)),
    Severity.FAIL: ("FAIL", ("red", "bold")),
    Severity.ERROR: ("ERROR", ("magenta", "bold")),
}
MARKER_WIDTH = max(len(m) for m, _ in MARKERS.values())
GROUP_TITLES = {"driver": "Driver", "gpu": "GPUs", "proc": "Processes", "env": "Environment", "host": "Host"}
MIN_WIDTH, MAX_WIDTH = 60, 100


def line_width() -> int:
    return max(MIN_WIDTH, min(MAX_WIDTH, shutil.get_terminal_size((80, 24)).columns))


def dot_line(title: str, marker: str, width: int, console: Console, styles: tuple[str, ...]) -> str:
    """``  title ........ ok``: the marker column lines up; a long title is never cut (it carries the
    numbers), it only pushes its marker past the column."""
    room = width - 2 - 1 - MARKER_WIDTH - 1
    dots = "." * max(room - len(title), 3)
    return f"  {title} {console.style(dots, 'dim')} {console.style(marker.rjust(MARKER_WIDTH), *styles)}"


def render_findings(findings: Iterable[Finding], console: Console, *, width: int | None = None,
                    group_order: Iterable[str] = tuple(GROUP_TITLES), verbose: bool = False) -> None:
    findings = list(findings)
    width = width or line_width()
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.id.split(".", 1)[0], []).append(f)
    order = [g for g in group_order if g in groups] + [g for g in groups if g not in group_order]
    shown_skip_remedies: set[str] = set()  # "skipped: no GPU" repeats one remedy: say it once
    for index, group in enumerate(order):
        if index:
            console.print()
        console.print(console.style(GROUP_TITLES.get(group, group.title()), "bold"))
        for f in groups[group]:
            marker, styles = MARKERS[f.severity]
            console.print(dot_line(f.title, marker, width, console, styles))
            if f.severity in (Severity.OK,) and not verbose:
                continue
            if f.detail and (f.severity is not Severity.SKIP or verbose):
                console.print(console.style(f"      {f.detail}", "dim"))
            if f.severity is Severity.SKIP and not verbose:
                if f.remedy and f.remedy not in shown_skip_remedies:
                    shown_skip_remedies.add(f.remedy)
                    console.print(f"      {console.style('fix:', 'bold')} {f.remedy}")
                continue
            if f.remedy and f.severity is not Severity.OK:
                console.print(f"      {console.style('fix:', 'bold')} {f.remedy}")
    console.print()
    console.print(verdict(findings, console))


def verdict(findings: list[Finding], console: Console) -> str:
    counts = summarize(findings)
    problems = counts["fail"] + counts["error"]
    parts = []
    for key, label in (("fail", "failed"), ("error", "crashed"), ("warn", "warning(s)"), ("info", "info"),
                       ("ok", "ok"), ("skip", "skipped")):
        if counts[key]:
            parts.append(f"{counts[key]} {label}")
    tally = ", ".join(parts) or "no checks ran"
    if problems:
        return console.style("NOT READY", "red", "bold") + f": {tally}. Fix the FAIL lines, then run the check again."
    if counts["warn"]:
        return console.style("READY, with warnings", "yellow", "bold") + f": {tally}."
    return console.style("READY", "green", "bold") + f": {tally}."
