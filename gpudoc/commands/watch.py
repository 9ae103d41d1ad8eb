"""`gpudoc watch [RUN_ID]`: follow a running run from another pane, instead of `watch nvidia-smi`.

Each frame is read from what the launcher already writes (the run record, the newest rows of
``gpu.csv``, the end of ``output.log``): the job pays nothing for being watched. Per GPU: memory
used of capacity with a short history, utilisation, and the peak so far against capacity and the
profile's target; the job's processes and what they hold; the last line the job printed; the time
since it started. When the run ends, the last frame is followed by the run's summary.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpudoc.launch.watch import PROCESSES
from gpudoc.output import printable
from gpudoc.profiles.model import DEFAULT_TARGET_UTILIZATION
from gpudoc.render.runs_text import sparkline
from gpudoc.runs.record import RUNNING, RunRecord, live_status, parse_iso
from gpudoc.runs.samples import newest_samples
from gpudoc.runs.tail import read_tail
from gpudoc.units import format_bytes, format_duration
from gpudoc.workspace import Workspace

HISTORY = 30  # samples of history per GPU in a frame
_CLEAR = "\x1b[H\x1b[2J"


@dataclass
class GpuNow:
    used: list[int] = field(default_factory=list)  # oldest first, the last HISTORY samples
    total: int | None = None
    utilization: str = ""
    job_bytes: int | None = None


def watch(ws: Workspace, run_id: str | None = None, *, interval_s: float = 1.0, frames: int | None = None) -> int:
    """Draw frames every ``interval_s`` until the run ends (or ``frames`` were drawn); 0 when it
    ended well, 1 when it failed, as `gpudoc run` would have said."""
    store, console = ws.store, ws.console
    record = store.named_or_latest(run_id)
    clear = _CLEAR if _is_terminal(console.out) else ""
    drawn = 0
    while True:
        record = store.load(record.id)
        status = live_status(record)
        console.out.write(clear + "\n".join(frame(record, status, store.samples_path(record.id),
                                                   store.log_path(record.id))) + "\n")
        console.out.flush()
        drawn += 1
        if status != RUNNING:
            console.print(f"run {record.id} ended: {status}"
                          + (f" ({record.diagnosis.summary})" if record.diagnosis and record.diagnosis.summary else ""))
            return 0 if status == "ok" else 1
        if frames is not None and drawn >= frames:
            return 0
        time.sleep(interval_s)


def frame(record: RunRecord, status: str, samples: Path, log: Path) -> list[str]:
    """One screenful, as lines. A run that is over is shown as it ended: its exit, its recorded
    samples and peaks, and no processes (their PIDs may belong to anything by now)."""
    live = status == RUNNING
    started = parse_iso(record.started_at)
    if live:
        elapsed = format_duration(time.time() - started) if started is not None else format_duration(None)
        head = f"{status}  {elapsed}"
    elif status == "lost":
        head = "lost: its gpudoc ended without recording how the run ended"
    else:
        exit_code = f", exit {record.exit_code}" if record.exit_code is not None else ""
        head = f"finished: {status}{exit_code}, after {format_duration(record.duration_s)}"
    lines = [f"gpudoc watch: run {record.id}  {head}",
             f"  {printable(' '.join(record.launched))[:100]}"]
    gpus, skipped = read_newest_samples(samples)
    target = float(((record.profile or {}).get("ladder") or {}).get("target_utilization", DEFAULT_TARGET_UTILIZATION))
    peaks = record.peak_memory_bytes or {}
    if not gpus and live:
        lines.append("  no GPU samples yet (none visible, or the first second has not passed)")
    elif not gpus:
        lines.extend(_recorded_peaks(record) or ["  no GPU samples recorded (no GPU seen, or the run was too short)"])
    for index, now in sorted(gpus.items()):
        used = now.used[-1] if now.used else 0
        total = now.total or max(now.used, default=0) or 1  # a GPU whose capacity and use are both 0: no share
        marks = sparkline(now.used, total)
        peak = max([*now.used, int(peaks.get(str(index), 0) or 0)])
        lines.append(f"  GPU {index}  {format_bytes(used):>9} / {format_bytes(now.total):<9} {marks:<{HISTORY}}  "
                     f"util {now.utilization or '-':>3}%  peak {peak / total:.0%} (target {target:.0%})"
                     + ("  job " + format_bytes(now.job_bytes) if now.job_bytes else ""))
    if skipped:
        lines.append(f"  {skipped} line{'s' if skipped != 1 else ''} of gpu.csv skipped (not a sample)")
    # Every process the launcher has seen in the job; once the run is over, none of them is its.
    seen = [p for p in record.pids if isinstance(p, dict)] if live else []
    held = _held(Path(samples).with_name(PROCESSES))
    if seen:
        shown = [f"{p.get('pid')}" + (f" ({format_bytes(held[str(p.get('pid'))])})" if str(p.get("pid")) in held
                                      else "") for p in seen[:12]]
        lines.append(f"  processes: {', '.join(shown)}" + (f" and {len(seen) - 12} more" if len(seen) > 12 else ""))
    last = [ln for ln in read_tail(log, 16 * 1024).splitlines() if ln.strip()][-1:]
    lines.append(f"  last line: {printable(last[0])[:120]}" if last else "  last line: (no output yet)")
    return lines


def _recorded_peaks(record: RunRecord) -> list[str]:
    """The run's peaks per GPU from its record (a run whose ``gpu.csv`` is gone or never written)."""
    totals = record.gpu_totals
    lines = []
    for index, peak in sorted(record.peak_memory_bytes.items(), key=lambda kv: (len(kv[0]), kv[0])):
        total = totals.get(index)
        share = f" of {format_bytes(total)} ({peak / total:.0%})" if total else ""
        lines.append(f"  GPU {index}  peak {format_bytes(peak)}{share}")
    return lines


def read_newest_samples(path: Path) -> tuple[dict[int, GpuNow], int]:
    """Per GPU, the newest HISTORY samples as a frame shows them; and how many lines of the file's
    end were not samples (corrupted bytes are skipped, and said)."""
    gpus: dict[int, GpuNow] = {}
    newest = newest_samples(path, history=HISTORY)
    for index, samples in newest.gpus.items():
        last = samples[-1]
        gpus[index] = GpuNow(used=[s.used for s in samples], total=next((s.total for s in reversed(samples) if s.total),
                                                                          None),
                             utilization=last.utilization, job_bytes=last.job)
    return gpus, newest.skipped


def _held(path: Path) -> dict[str, int]:
    """What each of the job's processes holds on the GPUs, as the launcher's sampler last saw it."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in doc.items() if isinstance(v, int)} if isinstance(doc, dict) else {}


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def watch_in_split(run_id: str, ws: Workspace) -> None:
    """``--watch``: `gpudoc watch RUN` in a tmux split below this pane (inside tmux only)."""
    import shutil
    import subprocess
    import sys

    from gpudoc.launch.options import safe_warn

    tmux = shutil.which("tmux", path=ws.environ.get("PATH", os.defpath))
    if not ws.environ.get("TMUX") or tmux is None:
        safe_warn("--watch: not inside tmux; follow the run from another terminal with: gpudoc watch " + run_id)
        return
    try:
        subprocess.run([tmux, "split-window", "-d", "-v", "-l", "12", "-c", str(ws.cwd), "--",
                        sys.executable, "-m", "gpudoc", "watch", run_id],
                       env=dict(ws.environ), capture_output=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        safe_warn(f"--watch: tmux could not split the window ({exc}); run: gpudoc watch {run_id}")
