"""`gpudoc clean`: end this user's stray processes holding GPU memory, then prove the memory is back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from gpudoc.errors import ExitStatus, UsageError
from gpudoc.output import Console
from gpudoc.procs.clean import Target
from gpudoc.render.show import show
from gpudoc.render.text import text
from gpudoc.results.fix import CleanPlan, CleanResult
from gpudoc.units import format_bytes
from gpudoc.workspace import Workspace

_KIND_TEXT = {
    "orphan_of_run": "left over from gpudoc run {run}",
    "group_member": "same process group as gpudoc run {run}",
    "own_other": "orphaned (its parent is gone)",
}


def _describe(t: Target) -> str:
    size = format_bytes(t.bytes) if t.bytes is not None else "-"
    gpus = ",".join(map(str, t.gpu_indexes)) or "-"
    cmd = " ".join(t.cmdline)[:70] if t.cmdline else (t.name or "?")
    return f"PID {t.pid:<7} GPU {gpus:<5} {size:>10}  {_KIND_TEXT[t.kind].format(run=t.run_id)}: {cmd}"


def tty_confirm(stdin: TextIO, console: Console) -> Callable | None:
    """A y/N prompt when a person is there to answer; None when stdin is not a terminal."""
    try:
        interactive = stdin.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        return None

    def ask(targets: list[Target]) -> bool:
        console.out.write(f"End these {len(targets)} process(es) (SIGTERM, then SIGKILL)? [y/N] ")
        console.out.flush()
        answer = stdin.readline().strip().lower()
        return answer in ("y", "yes")

    return ask


def clean(
    ws: Workspace,
    *,
    gpus: str | None = None,
    yes: bool = False,
    dry_run: bool = False,
    as_json: bool = False,
    term_timeout: float | None = None,
    release_timeout: float = 15.0,
) -> int:
    """End this user's strays on ``gpus`` (after confirmation or ``yes``); 0 when none is left."""
    from gpudoc.checks._common import parse_gpu_list
    from gpudoc.facts.holders import classify_gpu_processes
    from gpudoc.procs.clean import EMPTY_CACHE_NOTE, TERM_TIMEOUT_S, plan_clean, terminate, wait_for_release

    console = ws.console
    indexes = parse_gpu_list(gpus) if gpus is not None else ()
    facts = ws.gather()

    def finish(status: int, message: str | None = None, plan: CleanPlan | None = None,
               outcome: dict[str, Any] | None = None) -> int:
        timeout = TERM_TIMEOUT_S if term_timeout is None else term_timeout
        return show(CleanResult(plan, status, message, outcome, timeout, EMPTY_CACHE_NOTE), console,
                    as_json=as_json)

    if facts.nvml_error or not facts.gpus:
        return finish(ExitStatus.NEGATIVE, f"gpudoc clean: cannot see GPU processes: {facts.nvml_error or 'no GPU'}")
    known = sorted(g.index for g in facts.gpus)
    missing = [i for i in indexes if i not in known]
    if missing:
        raise UsageError(f"--gpus: no GPU {', '.join(map(str, missing))} here (GPUs: {', '.join(map(str, known))})")
    chosen = list(indexes) or known
    targets = plan_clean(facts, ws.store.owners(), chosen)
    # Everything else stays: other users' processes and this user's live jobs, each with its remedy.
    others = [h for h in classify_gpu_processes(facts, gpus=chosen) if h.pid not in {t.pid for t in targets}]
    plan = CleanPlan(
        gpus=tuple(chosen),
        targets=tuple({**t.to_dict(), "description": _describe(t)} for t in targets),
        others=tuple({**h.to_dict(), "remedy": h.remedy(), "description": h.describe()} for h in others),
    )
    if not as_json:
        text(plan, console)  # before any question: the user sees what would be ended
    if not targets:
        return finish(ExitStatus.OK, plan=plan)
    if dry_run:
        return finish(ExitStatus.OK, "--dry-run: nothing signalled.", plan)

    confirm = None if yes else tty_confirm(ws.stdin, console)
    if not yes and confirm is None:
        return finish(ExitStatus.NEGATIVE, "gpudoc clean: refusing to signal processes without confirmation "
                      "(stdin is not a terminal): pass --yes", plan)
    result = terminate(targets, yes=yes, confirm=confirm,
                       term_timeout=TERM_TIMEOUT_S if term_timeout is None else term_timeout)
    if result.refused:
        return finish(ExitStatus.NEGATIVE, "Nothing signalled.", plan)
    freed, released, _after = wait_for_release(ws.gather, facts, result.ended, chosen, timeout=release_timeout)
    result.freed_bytes, result.released = freed, released
    status = ExitStatus.OK if not result.survivors else ExitStatus.NEGATIVE
    return finish(status, plan=plan, outcome=result.to_dict())
