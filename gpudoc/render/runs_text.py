"""`gpudoc runs` (list, show, diff, prune) and `gpudoc run` (dry run, the run's end) as text."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpudoc.output import Console, printable
from gpudoc.render.text import knob_word, text
from gpudoc.results.runs import (
    AllRunsResult,
    DryRunResult,
    PruneResult,
    RunResult,
    RunsDiffResult,
    RunShowResult,
    RunsResult,
)
from gpudoc.runs.record import changes
from gpudoc.runs.steps import remaining
from gpudoc.units import format_bytes, format_duration

if TYPE_CHECKING:
    from gpudoc.runs.record import RunRecord


_RUNS_COLUMNS = ("id", "started", "duration", "status", "cause", "peak", "step", "changed", "command")
# Short names for the knobs a run list shows changing (the JSON keeps the full ones).
_KNOB_SHORT = {"micro_batch_size": "mbs", "gradient_accumulation_steps": "accum", "gradient_checkpointing": "ckpt",
               "max_seq_len": "seq", "precision": "prec", "zero_stage": "zero", "lora_rank": "lora"}
_STATUS_COLOURS = {"ok": "green", "failed": "red", "interrupted": "yellow", "lost": "red", "running": "cyan"}


@text.register
def _runs(result: RunsResult, console: Console) -> None:
    if not result.records:
        console.print(f"No runs yet in {result.runs_dir} (start one with `gpudoc run -- COMMAND`).")
        return
    rows = []
    for record, status in zip(result.records, result.live_status):
        command = printable(shlex.join(record.launched))
        rows.append((record.id, _started(record.started_at), format_duration(record.duration_s), status,
                     record.cause or "-", _peak_share(record), _step_time(record),
                     _knobs_changed(result.before.get(record.id), record),
                     command if len(command) <= 60 else command[:59] + "…"))
    widths = [max(len(_RUNS_COLUMNS[i]), *(len(row[i]) for row in rows)) for i in range(len(_RUNS_COLUMNS) - 1)]
    header = "  ".join(c.upper().ljust(w) for c, w in zip(_RUNS_COLUMNS, widths)) + "  COMMAND"
    console.print(console.style(header, "bold"))
    for row in rows:
        cells = [cell.ljust(w) for cell, w in zip(row, widths)]
        cells[3] = console.style(cells[3], _STATUS_COLOURS.get(row[3], "dim"))
        console.print("  ".join(cells) + "  " + row[-1])


_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], full: float) -> str:
    """One mark per value, its height the value's share of ``full``; a blank where there is none."""
    return "".join(" " if v is None else _SPARKS[min(int(v / full * len(_SPARKS)), len(_SPARKS) - 1)]
                   for v in values)


@text.register
def _run_show(result: RunShowResult, console: Console) -> None:
    record, say = result.record, console.print
    say(console.style(f"run {record.id}", "bold") + f"  {result.live_status}"
        + (f", {record.cause}" if record.cause else "") + f", {format_duration(record.duration_s)}")
    say(f"  command: {printable(shlex.join(record.launched))}")
    if record.launched != list(record.command):
        # A retry's rung, or the knobs bound into the arguments: what the user typed differs.
        say(f"  as typed: {printable(shlex.join(record.command))}")
    say(f"  started: {_started(record.started_at)} in {printable(record.cwd)}")
    if record.diagnosis is not None and record.diagnosis.summary:
        say(f"  diagnosis: {printable(record.diagnosis.summary)}")
    if record.knobs:
        say("  knobs: " + ", ".join(f"{k}={printable(knob_word(v))}" for k, v in sorted(record.knobs.items())))
    if record.env_set:
        say("  environment gpudoc set (knobs bound as GPUDOC_*, the allocator): " + ", ".join(f"{k}={printable(str(v))}" for k, v in sorted(record.env_set.items())))
    for label, edits in (("edited", record.file_edits), ("then edited (for the next attempt)", record.applied_edits)):
        for edit in edits:
            if isinstance(edit, dict):
                say(f"  {label} {printable(str(edit.get('path')))}: {printable(edit_text(edit))}")
    for line in _probe_lines(record):
        say(line)
    if record.resumed_from:
        said = record.resumed_from
        say(f"  resumed from: {printable(str(said.get('path')))} ({said.get('framework')}"
            + (f", step {said['step']})" if said.get("step") is not None else ")"))
    if not result.used:
        say("  memory over time: no samples (no GPU seen, or the run was too short)")
        return
    span = format_duration((result.end or 0) - (result.start or 0))
    say(f"  memory over time, per GPU ({span}, each mark the highest use in its slice, full height = capacity):")
    for gpu, used in sorted(result.used.items()):
        total = result.total.get(gpu)
        peak = max((u for u in used if u is not None), default=0)
        scale = total or peak or 1
        marks = sparkline(used, scale)
        share = f" = {peak / total:.0%}" if total else ""
        say(f"    GPU {gpu} {marks} peak {format_bytes(peak)}" + (f" of {format_bytes(total)}{share}" if total else ""))
    if result.skipped:
        say(f"  {result.skipped} line{'s' if result.skipped != 1 else ''} of gpu.csv skipped (not a sample)")


def _probe_lines(record: RunRecord) -> list[str]:
    """What the probe inside the job saw: the knobs it trained with (and how each was seen), its
    steps, and what filled the memory at an OOM."""
    lines = []
    observed = {k: v for k, v in (record.observed or {}).items() if isinstance(v, dict) and "value" in v}
    if observed:
        lines.append("  observed in the job: " + ", ".join(
            f"{k}={printable(knob_word(v['value']))} ({printable(str(v.get('how')))})" for k, v in sorted(observed.items())))
    lines += step_lines(record, chart=True)
    went_on = record.oom_recovered or {}
    if went_on:  # OOMs the job went on from by itself (HF's auto_find_batch_size): said, never a failure
        lines.append(f"  recovered from an OOM at micro batch {went_on.get('micro_batch_size') or '?'} (rank "
                     f"{went_on.get('rank')}, {went_on.get('phase') or 'phase unknown'}, after {went_on.get('step')} "
                     f"step(s), {went_on.get('times')} time(s)); the job went on with micro batch "
                     f"{went_on.get('went_on_with') or '?'}")
    oom = record.oom or {}
    if oom:
        where = f"rank {oom.get('rank')}" + (f", {oom['phase']}" if oom.get("phase") else "") + (
            f", after {oom['step']} step(s)" if oom.get("step") is not None else "")
        parts = ", ".join(f"{k.replace('_', ' ')} {format_bytes(v)}" for k, v in (oom.get("breakdown") or {}).items()
                          if isinstance(v, int))
        lines.append(f"  out of memory: {where}" + (f"; {parts}" if parts else ""))
        for top in (oom.get("top") or [])[:5]:
            lines.append(f"    {format_bytes(top['bytes'])} live from {printable(top['where'])}")
        if oom.get("snapshot"):
            lines.append(f"  memory history: {printable(oom['snapshot'])} (gunzip it, then drop the .pickle on "
                         "https://pytorch.org/memory_viz)")
    return lines


_SOURCES = {"log:hf-trainer": "the HF Trainer's own log lines", "log:lightning": "Lightning's progress bar",
            "log:tqdm": "the job's tqdm bar"}


def step_lines(record: RunRecord, *, chart: bool = False) -> list[str]:
    """What one step cost (the record's ``steps``): its time and throughput, how far the job got of
    its total and what the rest would take at that pace, the allocator's peak against the card; with
    ``chart``, step time and peak over the run as marks."""
    steps = record.steps or {}
    if not steps.get("count") and not steps.get("seconds_per_step"):
        return []
    per_step, unit = steps.get("seconds_per_step"), "batch(es)" if steps.get("unit") == "batch" else "optimizer step(s)"
    figures = [f"{steps.get('count') or '?'}" + (f" of {steps['total']}" if steps.get("total") else "") + f" {unit}"]
    if isinstance(per_step, (int, float)):
        how = _SOURCES.get(str(steps.get("source")), "median, the first left out")
        figures.append(f"{per_step:.3g} s each ({how})")
    for key, word in (("samples_per_second", "samples/s"), ("tokens_per_second", "tokens/s")):
        if isinstance(steps.get(key), (int, float)):
            figures.append(f"{_rate(steps[key])} {word}")
    peak, reserved = steps.get("peak_allocated_bytes"), steps.get("peak_reserved_bytes")
    capacity = steps.get("capacity_bytes") or min(record.gpu_totals.values(), default=None)
    if peak:
        figures.append(f"peak allocated {format_bytes(peak)}" + (f", reserved {format_bytes(reserved)}" if reserved else "")
                       + (f" of {format_bytes(capacity)} ({(reserved or peak) / capacity:.0%})" if capacity else ""))
    lines = ["  steps: " + ", ".join(figures)]
    left = remaining(steps)
    if left is not None:
        count, seconds, whole = left
        lines.append(f"  at this pace the {steps['total']} steps take {format_duration(whole)}"
                     + (f"; {count} left: {format_duration(seconds)} more" if count else ""))
    series = [p for p in steps.get("series") or () if isinstance(p, dict)]
    if chart and len(series) >= 2:
        span = f"steps {series[0].get('step')}-{series[-1].get('step')}"
        times = [p.get("seconds") for p in series]
        slowest = max((t for t in times if isinstance(t, (int, float))), default=None)
        if slowest:
            lines.append(f"  step time over the run ({span}, full height = {slowest:.3g} s): "
                         + sparkline([t if isinstance(t, (int, float)) else None for t in times], slowest))
        peaks = [p.get("peak_reserved_bytes") or p.get("peak_allocated_bytes") for p in series]
        top = capacity or max((v for v in peaks if isinstance(v, int)), default=0)
        if top and any(isinstance(v, int) for v in peaks):
            lines.append(f"  peak reserved over the run ({span}, full height = {format_bytes(top)}): "
                         + sparkline([v if isinstance(v, int) else None for v in peaks], top))
    return lines


def _rate(value: float) -> str:
    """``10.3``, ``830``, ``32,768``: a throughput as people read it, never in exponent form."""
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _step_time(record: RunRecord) -> str:
    per_step = (record.steps or {}).get("seconds_per_step")
    return f"{per_step:.3g}s" if isinstance(per_step, (int, float)) else "-"


def edit_text(edit: dict[str, Any]) -> str:
    """A file edit's changes as people read them: ``batch_size 32 -> 16, lr 0.1 -> 0.05``."""
    return ", ".join(f"{change.get('key')} {knob_word(change.get('old'))} -> {knob_word(change.get('new'))}"
                     if isinstance(change, dict) else str(change) for change in edit.get("changes") or ())


@text.register
def _runs_diff(result: RunsDiffResult, console: Console) -> None:
    console.print(console.style(f"{result.a} -> {result.b}", "bold"))
    parts = (("knobs", result.knobs), ("environment", result.env), ("file edits", result.edits),
             ("outcome", result.outcome))
    if not any(rows for _, rows in parts):
        console.print("  nothing changed: same knobs, environment, edits and outcome")
    for title, rows in parts:
        if rows:
            console.print(f"  {title}:")
            for what, old, new in rows:
                console.print(f"    {printable(_WORDS.get(what, what))}: {_shown(what, old)} -> {_shown(what, new)}"
                              f"{_relative(old, new, what)}")


# Figures whose change is worth a percentage: what a rung cost in memory and in time.
_RELATIVE = ("peak_bytes", "seconds_per_step", "samples_per_second", "tokens_per_second", "peak_allocated_bytes",
             "duration_s")
_WORDS = {"seconds_per_step": "step time", "samples_per_second": "samples/s", "tokens_per_second": "tokens/s",
          "peak_allocated_bytes": "peak allocated"}


def _relative(old: Any, new: Any, what: str) -> str:
    if what not in _RELATIVE or not isinstance(old, (int, float)) or not isinstance(new, (int, float)) or not old:
        return ""
    return f" ({(new - old) / old:+.0%})"


def _shown(what: str, value: Any) -> str:
    if value is None:
        return "-"
    if what == "seconds_per_step" and isinstance(value, (int, float)):
        return f"{value:.3g} s"
    if what in ("samples_per_second", "tokens_per_second") and isinstance(value, (int, float)):
        return _rate(value)
    if what in ("peak_bytes", "peak_allocated_bytes") and isinstance(value, (int, float)):
        return format_bytes(value)
    if what == "duration_s" and isinstance(value, (int, float)):
        return format_duration(value)
    return printable(knob_word(value))


@text.register
def _all_runs(result: AllRunsResult, console: Console) -> None:
    if not result.tables:
        console.print("No project has run records yet (`gpudoc run` adds its project to the list).")
    for number, table in enumerate(result.tables):
        if number:
            console.print("")
        console.print(console.style(f"== {table.runs_dir}", "bold"))
        _runs(table, console)


@text.register
def _prune(result: PruneResult, console: Console) -> None:
    verb = "would remove" if result.dry_run else "removed"
    left = result.total - len(result.removed)  # a dry run says what would be left
    console.print(f"{verb} {len(result.removed)} of {result.total} run(s) in {result.runs_dir}; {left} left")
    if result.removed:
        shown = ", ".join(result.removed[:3]) + (", ..." if len(result.removed) > 3 else "")
        console.print(f"  {shown}")
    if result.kept_live:
        console.print(f"  kept {len(result.kept_live)} old run(s) of a chain still running: "
                      + ", ".join(result.kept_live[:3]) + (", ..." if len(result.kept_live) > 3 else ""))
    if result.removed_unlisted:
        console.print(f"{verb} {len(result.removed_unlisted)} file state(s) kept before edits no run lists "
                      f"(fix --log --apply, profile new --force), from "
                      f"{printable(os.path.dirname(result.removed_unlisted[0]))}")


def _peak_share(record: RunRecord) -> str:
    """The highest share of a GPU's capacity the run's samples saw, or its size when the capacity is unknown."""
    unused = _unused_share(record.peak_memory_bytes or {}, record.gpu_totals)
    if unused is not None:
        return f"{1 - unused:.0%}"
    peak = record.peak_bytes
    return format_bytes(peak) if peak else "-"


def _knobs_changed(before: RunRecord | None, record: RunRecord) -> str:
    """What this run turned differently from the run it is compared with (``RunsResult.before``):
    "mbs 8→4, accum 2→4"."""
    if before is None:
        return "-"
    turned = [f"{_KNOB_SHORT.get(k, k)} {'-' if old is None else knob_word(old)}→{'-' if new is None else knob_word(new)}"
              for k, old, new in changes(before.knobs, record.knobs)]
    text = printable(", ".join(turned)) or "-"
    return text if len(text) <= 40 else text[:39] + "…"


def _started(stamp: str | None) -> str:
    # "2026-01-31T14:05:09+0100" -> "2026-01-31 14:05:09"
    return (stamp or "-")[:19].replace("T", " ")


@text.register
def _dry_run(result: DryRunResult, console: Console) -> None:
    console.print(console.style("command:", "bold") + " " + shlex.join(result.argv))
    console.print(console.style("environment:", "bold") + ("" if result.env_set else " (nothing set)"))
    for key, value in result.env_set.items():
        console.print(f"  {key}={shlex.quote(value)}")
    console.print(console.style("file edits:", "bold") + ("" if result.file_edits else " (none)"))
    for edit in result.file_edits:
        console.print(edit["diff"].rstrip("\n"))
    if result.bindings:
        console.print(console.style("bindings:", "bold"))
    for b in result.bindings:
        console.print("  " + _binding_line(b))
    for note in result.notes:
        console.print(console.style(f"note: {note}", "dim"))
    console.print("(dry run: nothing launched, nothing changed)")


def _binding_line(b: dict[str, Any]) -> str:
    """``micro_batch_size -> ds.json:train_micro_batch_size_per_gpu  1 -> 8`` (or ``= 8 (unchanged)``)."""
    file, key = b.get("file"), b.get("key")

    def word(value: Any) -> str:
        if file == "command" and isinstance(value, str) and value and not any(c.isspace() for c in value):
            return value  # a word of the command line, as the run itself says it ("--flag 16 -> 8")
        return json.dumps(value) if isinstance(value, (str, bool)) or value is None else str(value)

    where = (f"command {key}" if file == "command" else f"{file}:{key}" if key else file if file
             else b.get("where") or "(nowhere)")  # no file: a knob at the framework's default
    old, new = b.get("old"), b.get("new")
    if b.get("added"):
        change = "(added)" if new in ("", None) else f"{word(new)} (added)"
    elif new is None:
        change = f"{word(old)} (removed)" if old is not None else "(removed)"
    elif type(old) is type(new) and old == new:
        change = f"= {word(new)} (unchanged)"
    else:
        change = f"{word(old)} -> {word(new)}"
    return printable(f"{b.get('knob') or '(flag)'} -> {where}  {change}")


@text.register
def _run(result: RunResult, console: Console) -> None:
    """The summary after a run (gpudoc's own words go to stderr: stdout is the job's)."""
    from gpudoc.launch.signals import signal_name

    record = result.record
    say, style = console.print, console.style
    status_text = {"ok": style("finished", "green", "bold"), "failed": style("FAILED", "red", "bold"),
                   "interrupted": style("interrupted", "yellow", "bold")}.get(record.status, record.status)
    how = f"exit {result.exit_code}"
    if result.killed_by is not None and result.interrupted_by not in (None, result.killed_by):
        # The user's signal sets the status (130, 143); the job itself had to be SIGKILLed after it.
        how += (f" ({signal_name(result.interrupted_by)} from the user; the job was then killed by "
                f"{signal_name(result.killed_by)})")
    elif result.killed_by is not None and result.interrupted_by is None:
        how += f" (killed by {signal_name(result.killed_by)})"
    elif result.interrupted_by is not None and (result.exit_code != 0 or result.killed_by is not None):
        how += f" ({signal_name(result.interrupted_by)} from the user)"
    say("")
    say(f"gpudoc: run {record.id} {status_text} after {format_duration(record.duration_s or 0)}: {how}")
    if record.peak_memory_bytes:
        say("  peak GPU memory: " + ", ".join(_peak_text(record.peak_memory_bytes, record.gpu_totals)))
    for line in step_lines(record):
        say(line)
    if record.cause and record.cause != "ok":
        summary = _diagnosis_summary(record.diagnosis)
        say(f"  cause: {style(record.cause, 'bold')}" + (f" — {summary}" if summary else ""))
    if record.ended_by:
        say(f"  gpudoc ended the job early ({record.ended_by}) instead of waiting for a timeout")
    if record.terminal_lost:
        say("  the terminal went away during the run; the log is complete")
    if record.log_error:
        say(f"  the log is incomplete: {record.log_error}")
    if record.samples_error:
        say(f"  GPU memory samples are incomplete: {record.samples_error}")
    say(f"  log: {result.log_path}")
    unused = _unused_share(record.peak_memory_bytes, record.gpu_totals)
    if record.status != "ok" and not result.relaunch_follows:
        say(f"  next: gpudoc fix {record.id}")
    elif unused is not None and unused > 0.4:
        say(f"  next: gpudoc fix {record.id}   (memory was left unused: it can propose a bigger batch)")


def _diagnosis_summary(diagnosis: Any) -> str:
    if diagnosis is None:
        return ""
    summary = diagnosis.get("summary") if isinstance(diagnosis, dict) else getattr(diagnosis, "summary", None)
    return str(summary or "")


def _unused_share(peaks: dict[str, int], totals: dict[str, int]) -> float | None:
    shares = [1 - peak / totals[key] for key, peak in peaks.items() if totals.get(key)]
    return min(shares) if shares else None


def _peak_text(peaks: dict[str, int], totals: dict[str, int]) -> list[str]:
    out = []
    for key, peak in sorted(peaks.items(), key=lambda kv: int(kv[0])):
        total = totals.get(key)
        share = f" / {format_bytes(total)} ({100 * peak / total:.0f}%)" if total else ""
        out.append(f"GPU {key} {format_bytes(peak)}{share}")
    return out
