"""Fail-fast across the nodes of one job, through the run directory they share.

Each node runs its own `gpudoc run` (under srun, or torchrun's c10d rendezvous); gpudoc schedules
nothing and needs no server. When one node's gpudoc sees a GPU OOM it leaves a small marker in
``<runs>/.jobs/<job id>/``; the other nodes' gpudoc look there every second and end their part
of the job instead of waiting for the collective timeout. Needs a ``GPUDOC_HOME`` on a shared
filesystem; without one each node still ends its own ranks.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

from gpudoc.atomic import atomic_write_text
from gpudoc.runs.store import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE

JOBS_DIR = ".jobs"
# Clocks of different nodes disagree a little; a marker older than our own start by more than
# this is a leftover of an earlier job that reused the same id.
CLOCK_SLACK_S = 5.0
# A marker gpudoc writes is a few hundred bytes (its line is cut at 500 characters).
MAX_MARKER_BYTES = 16 * 1024


def _safe(job_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", job_id)[:120] or "_"


class JobSync:
    def __init__(self, runs_root: Path, job_id: str, run_id: str, host: str, *,
                 started: float | None = None) -> None:
        self.dir = Path(runs_root) / JOBS_DIR / _safe(job_id)
        self.job_id = job_id
        self.run_id = run_id
        self.host = host
        self.started = time.time() if started is None else started
        self.announced = False

    def announce(self, cause: str, *, rank: int | None, line: str) -> None:
        """Tell the job's other nodes (once): this node's run failed with ``cause``."""
        if self.announced:
            return
        self.announced = True
        doc = {"job_id": self.job_id, "run_id": self.run_id, "host": self.host, "cause": cause,
               "rank": rank, "line": line[:500], "time": time.time()}
        try:
            self.dir.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.dir.mkdir(mode=PRIVATE_DIR_MODE)
                os.chmod(self.dir, PRIVATE_DIR_MODE)  # exact, whatever the umask: its lines quote the job's log
            except FileExistsError:
                pass  # another node of this job made it (a shared GPUDOC_HOME)
            # A fresh temporary file, renamed over the marker: a link planted in a shared home is
            # replaced, never written through.
            atomic_write_text(self.dir / f"{self.run_id}.json", json.dumps(doc), mode=PRIVATE_FILE_MODE)
        except OSError:
            pass  # a read-only or full runs directory must not touch the job

    def failures_elsewhere(self) -> list[dict]:
        """Markers left by the job's other nodes since this run started."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        found = []
        now = time.time()
        for name in sorted(names):
            if not name.endswith(".json") or name == f"{self.run_id}.json":
                continue
            path = self.dir / name
            try:
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
                    continue  # a marker this user did not write never ends this user's job
                if info.st_size > MAX_MARKER_BYTES:
                    continue  # not a marker gpudoc wrote
                doc = json.loads(path.read_text(encoding="utf-8"))
                stamp = float(doc["time"])
            except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
                continue  # unreadable or malformed (a nested-list bomb included): not a failure of this job
            # Only markers of this attempt (not an earlier job's with the same id, nor a forged future one).
            if isinstance(doc, dict) and self.started - CLOCK_SLACK_S <= stamp <= now + CLOCK_SLACK_S:
                found.append(doc)
        return found
