"""`gpudoc tune` as text: a line per trial, then the largest micro batch that fit."""

from __future__ import annotations

from gpudoc.output import Console
from gpudoc.render.text import text
from gpudoc.results.tune import FITS, TuneResult
from gpudoc.units import GIB


def _gib(value: int | None) -> str:
    return f"{value / GIB:.2f} GiB" if value is not None else "unknown"


@text.register
def _tune(result: TuneResult, console: Console) -> None:
    search, style = result.search, console.style
    console.print(f"gpudoc tune {result.tune_id}: global batch {result.global_batch_size} "
                  f"over {result.world_size} process(es), {len(search.trials)} trial(s) "
                  f"(at most {search.launch_bound})")
    for trial in search.trials:
        word = style(trial.outcome, "green" if trial.outcome == FITS else "red")
        figures = [f"peak {_gib(trial.peak_bytes)}"] if trial.peak_bytes is not None else []
        if trial.seconds_per_step is not None:
            figures.append(f"{trial.seconds_per_step:.3g} s/step")
        console.print(f"  micro batch {trial.micro_batch_size} x accumulation {trial.gradient_accumulation_steps}: "
                      f"{word}" + (f" ({', '.join(figures)})" if figures else "")
                      + (style(f"  run {trial.run_id}", "dim") if trial.run_id else ""))
    for micro, why in search.skipped:
        console.print(style(f"  micro batch {micro}: skipped, {why}", "dim"))
    best = search.best
    if best is None or result.exit_code:
        console.print("No micro batch fit." if best is None else "The search stopped before it ended.")
    else:
        step = f"{best.seconds_per_step:.3g} s" if best.seconds_per_step is not None else "unknown"
        console.print(f"Largest micro batch that fits: {best.micro_batch_size} x accumulation "
                      f"{best.gradient_accumulation_steps} (was {result.before[0]} x {result.before[1]}); peak "
                      f"{_gib(best.peak_bytes)}, headroom {_gib(result.headroom_bytes)}, step time {step}")
    if result.applied:
        where = result.applied.get("path") or ", ".join(result.applied.get("files") or []) or "the command"
        console.print(f"Applied: {where}")
    for note in result.notes:
        console.print(style(f"note: {note}", "dim"))
