"""torchrun's own per-rank log files: where the job's command line says they go, and which are
this run's.

With ``--log-dir D`` (plus ``--redirects``/``--tee``, and ``--local-ranks-filter`` hiding some
ranks from the console) torchrun writes ``D/<run id>_<suffix>/attempt_<n>/<local rank>/stdout.log``
and ``stderr.log``. A rank whose output the console never showed failed there: gpudoc reads them
when the combined output does not explain the failure, and `gpudoc logs RUN --rank N` prints one.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpudoc.job.argv import JobCommand

# Clocks: a run directory torchrun made is at most this much older than gpudoc's own start.
_SLACK_S = 2.0


def rank_log_dir(job: JobCommand, cwd: Path) -> Path | None:
    """``--log-dir`` (``--log_dir``) of a torchrun command, resolved from ``cwd``; None without one."""
    if job.launcher != "torchrun":
        return None
    value = job.options.get("--log_dir")
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else cwd / path


def rank_logs(log_dir: Path, *, since: float) -> dict[int, list[Path]]:
    """Local rank -> its log files (stdout, stderr) of the newest attempt of the run directory
    torchrun made after ``since`` (gpudoc's start); empty when there is none."""
    try:
        runs = [entry for entry in os.scandir(log_dir) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return {}
    fresh = [entry for entry in runs if entry.stat(follow_symlinks=False).st_mtime >= since - _SLACK_S]
    if not fresh:
        return {}
    run_dir = Path(max(fresh, key=lambda e: e.stat(follow_symlinks=False).st_mtime).path)
    attempts = sorted(run_dir.glob("attempt_*"), key=lambda p: _number(p.name.removeprefix("attempt_")))
    if not attempts:
        return {}
    found: dict[int, list[Path]] = {}
    for rank_dir in attempts[-1].iterdir():
        if rank_dir.is_dir() and not rank_dir.is_symlink() and rank_dir.name.isdigit():
            files = [rank_dir / name for name in ("stdout.log", "stderr.log") if (rank_dir / name).is_file()]
            if files:
                found[int(rank_dir.name)] = files
    return dict(sorted(found.items()))


def _number(text: str) -> int:
    return int(text) if text.isdigit() else -1
