"""`gpudoc fix` as text: the failure in one sentence, the figures, the rungs in order, what was written;
and `gpudoc clean`: what it would end, what it ended, the memory that came back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpudoc.output import Console
from gpudoc.render.text import knob_word, text
from gpudoc.results.fix import CleanPlan, CleanResult, FixResult
from gpudoc.units import format_bytes

if TYPE_CHECKING:
    # Types only: importing gpudoc.ladder runs its package (the whole ladder) on the launch path.
    from gpudoc.diagnose.diagnosis import Diagnosis
    from gpudoc.ladder.model import LadderResult, Suggestion


@text.register
def _fix(result: FixResult, console: Console) -> None:
    style = console.style
    diag, ladder = result.diagnosis, result.ladder
    if result.nodes:
        _nodes(result, console)
    console.print(diag.summary or f"Cause: {diag.cause}.")
    figures = _figures(diag)
    if figures:
        console.print(style(f"  {figures}", "dim"))
    if ladder.shortfall_bytes:
        console.print(style(f"Short by at least {format_bytes(ladder.shortfall_bytes)}.", "dim"))
    if result.knob_places:
        places = ", ".join(f"{knob} ({where})" for knob, where in result.knob_places.items())
        console.print(style(f"Read from the job's command: {places}.", "dim"))
    elif result.profile_path is None:
        console.print(style("No profile, and no knobs on the job's command line: pass -p PROFILE (or write "
                            "./gpudoc.toml) so gpudoc knows the job's knobs.", "dim"))
    if ladder.suggestions:
        console.print("")
        console.print(style("Next, in order:", "bold"))
        for number, suggestion in enumerate(ladder.suggestions, start=1):
            tag = " (semantic)" if suggestion.semantic else ""
            console.print(f"{number}. {style(suggestion.rung, 'bold')}{tag}  — {saving_text(suggestion)}"
                          f"{fit_text(suggestion, ladder.shortfall_bytes)}")
            for line in knob_diff_lines(suggestion, current_env=result.profile_env):
                console.print(f"     {line}")
            console.print(style(f"     {suggestion.why}", "dim"))
        console.print("")
        if result.applied and "path" in result.applied:
            line = f"Wrote {result.applied['rung']} to {result.applied['path']}"
            if result.applied.get("backup"):
                line += f" (backup: {result.applied['backup']})"
            console.print(style(line, "green"))
        elif result.applied and (result.applied.get("files") or result.rerun is not None):
            files = result.applied.get("files") or []
            written = f" to {', '.join(files)}" if files and result.rerun is None else ""
            console.print(style(f"Applied {result.applied['rung']}{written}.", "green"))
        elif result.applied:
            # A job read from its command whose rung lives in flags and variables: there is nothing
            # to write (a second --apply would write nothing either); the next command carries it.
            console.print(f"Nothing to write for {result.applied['rung']}: the next command, below, carries it.")
        elif result.rerun is not None or any(note.startswith("nothing written") for note in result.notes):
            pass  # the relaunch, or why nothing was written, is said below
        elif ladder.first_profile_change() is not None and result.knob_places:
            console.print(f"Apply {_first_change(ladder)} with `gpudoc fix --apply` (edits the job's config files "
                          "and gives the new command), or `gpudoc fix --rerun` to apply and relaunch.")
        elif ladder.first_profile_change() is not None:
            console.print(f"Apply {_first_change(ladder)} with `gpudoc fix --apply` (writes {result.target_path}), "
                          "or `gpudoc fix --rerun` to apply and relaunch.")
    if ladder.semantic_held_back:
        console.print("")
        console.print(style("Held back (they change the experiment; --allow-semantic to propose them):", "yellow"))
        for suggestion in ladder.semantic_held_back:
            diff = "; ".join(knob_diff_lines(suggestion, current_env=result.profile_env))
            console.print(f"  {suggestion.rung}: {diff}")
    _skipped(ladder, console)
    for note in result.notes:
        if ladder.semantic_held_back and note.startswith("held back"):
            continue  # already listed above
        console.print(style(f"Note: {note}", "dim"))


_UNDECLARED = " is not declared in [train]"


def _skipped(ladder: LadderResult, console: Console) -> None:
    """Every rung passed over, with its reason; the ones whose knob the job does not declare in one line."""
    undeclared = [s.reason[: -len(_UNDECLARED)] for s in ladder.skipped if s.reason.endswith(_UNDECLARED)]
    said = [s for s in ladder.skipped if not s.reason.endswith(_UNDECLARED)]
    if not said and not undeclared:
        return
    console.print("")
    console.print(console.style("Skipped:", "bold"))
    for skipped in said:
        console.print(f"  {skipped.rung}: {skipped.reason}")
    if undeclared:
        names = ", ".join(dict.fromkeys(undeclared))
        console.print(console.style(f"  not declared in [train], so no rung changes them: {names}", "dim"))


def _first_change(ladder: LadderResult) -> str:
    """What `--apply` writes: the first rung, or the first two when the first cannot fit alone
    (the allocator setting rides with the next rung, as `--retry-oom` does it)."""
    chosen = ladder.first_profile_change()
    listed = [s.rung for s in ladder.suggestions]
    if chosen is None or chosen.rung in listed:
        return "the first change"
    parts = chosen.rung.split("+")
    numbers = [str(listed.index(p) + 1) for p in parts if p in listed]
    return (f"{chosen.rung} ({' and '.join(numbers)} in one relaunch: {parts[0]} alone cannot cover the "
            "shortfall)")


def _figures(diag: Diagnosis) -> str:
    """The allocator's own figures, beside the sentence (which already says what they mean)."""
    parts = []
    if diag.allocated_bytes is not None:
        parts.append(f"{format_bytes(diag.allocated_bytes)} allocated by PyTorch")
    if diag.reserved_unallocated_bytes is not None:
        parts.append(f"{format_bytes(diag.reserved_unallocated_bytes)} reserved but unallocated")
    others = [(pid, size) for pid, size in diag.other_processes if size > 0]
    if others:
        held = ", ".join(f"PID {pid} {format_bytes(size)}" for pid, size in others[:4])
        parts.append(f"other processes: {held}")
    return "; ".join(parts)


def _nodes(result: FixResult, console: Console) -> None:
    """Which node failed first, and the others as what followed from it."""
    diag = result.diagnosis
    chosen = next(n for n in result.nodes if n.role == "first_failure")
    where = ", ".join(w for w in (f"rank {diag.rank}" if diag.rank is not None else None,
                                  f"GPU {diag.gpu_index}" if diag.gpu_index is not None else None) if w)
    name = f"node {chosen.node}" if chosen.node else chosen.source
    run = f" (run {chosen.run_id})" if chosen.run_id is not None and chosen.run_id not in name else ""
    head = f"Job {result.job_id}: " if result.job_id else ""
    console.print(f"{head}looked at {len(result.nodes)} records/logs; the first real failure is on {name}{run}"
                  + (f", {where}" if where else "") + f": {diag.cause}.")
    for node in result.nodes:
        if node is chosen:
            continue
        other = f"node {node.node}" if node.node else node.source
        if node.run_id is not None and node.run_id not in other:
            other += f" (run {node.run_id})"
        if node.role == "ok":
            tail = "finished"
        elif node.role == "running":
            tail = "still running (or its launcher died)"
        else:
            tail = f"{node.cause}: ended because of it" + (" (gpudoc ended it)" if node.ended_by_gpudoc else "")
        console.print(console.style(f"  {other}: {tail}", "dim"))


def knob_diff_lines(suggestion: Suggestion, *, current_env: Mapping[str, str] | None = None) -> list[str]:
    rows: list[tuple[str, str, str]] = []
    for knob, (old, new) in suggestion.changes.items():
        rows.append((knob, knob_word(old), knob_word(new)))
    for var, value in suggestion.env.items():
        old = (current_env or {}).get(var)
        rows.append((var, old if old is not None else "(unset)", value))
    width = max((len(r[0]) for r in rows), default=0)
    return [f"{name:<{width}}  {old} → {new}" for name, old, new in rows]


def saving_text(suggestion: Suggestion) -> str:
    saving = suggestion.expected_saving_bytes
    if saving is None:
        return "saving not estimated"
    if saving < 0:
        return f"uses about {format_bytes(-saving)} more per GPU"
    return f"expected to free about {format_bytes(saving)} per GPU"


def fit_text(suggestion: Suggestion, shortfall: int | None) -> str:
    """Whether the rung is expected to make the job fit, against the OOM's own shortfall."""
    saving = suggestion.expected_saving_bytes
    if saving is None or saving < 0 or shortfall is None:
        return ""
    if saving >= shortfall:
        return f"; expected to fit (more than the {format_bytes(shortfall)} short)"
    return f"; not expected to fit alone (the OOM was {format_bytes(shortfall)} short)"


@text.register
def _clean_plan(plan: CleanPlan, console: Console) -> None:
    where = ",".join(map(str, plan.gpus))
    if plan.targets:
        total = sum(t.get("bytes") or 0 for t in plan.targets)
        console.print(f"Your processes holding memory on GPU {where} ({format_bytes(total)}):")
        for target in plan.targets:
            console.print(f"  {target['description']}")
    else:
        console.print(f"Nothing of yours holds memory on GPU {where}.")
    for other in plan.others:
        console.print(f"  not touched: {other['description']}")
        console.print(f"    fix: {other['remedy']}")


@text.register
def _clean(result: CleanResult, console: Console) -> None:
    if result.message:
        (console.error if result.exit_code else console.print)(result.message)
    outcome = result.outcome
    if outcome is None:
        return
    for pid in outcome["terminated"]:
        console.print(f"  ended PID {pid} (SIGTERM)")
    for pid in outcome["killed"]:
        console.print(f"  ended PID {pid} (SIGKILL after {result.term_timeout_s:g} s)")
    for skipped in outcome["skipped"]:
        console.print(f"  left PID {skipped['pid']} alone: {skipped['reason']}")
    for pid in outcome["survivors"]:
        console.print(f"  PID {pid} survived SIGKILL (stuck in the driver?): sudo nvidia-smi --gpu-reset or reboot")
    if outcome.get("freed_bytes") is not None and result.plan is not None:
        state = "released" if outcome.get("released") else "not yet released by the driver"
        console.print(f"Freed {format_bytes(outcome['freed_bytes'])} on GPU {','.join(map(str, result.plan.gpus))} "
                      f"({state}, per NVML).")
    console.print(f"Note: {result.note}")
