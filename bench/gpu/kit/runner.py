"""What every section needs: the gpudoc under test, the job's interpreter, a clock, and a result that is
on disk after every change (a section stopped at its limit keeps what it measured).

The kit itself never imports torch: everything that touches the GPU runs in a child process with a
time limit, so a hung CUDA call costs one figure, not the report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().parent.parent
JOBS = KIT / "jobs"
REPO = KIT.parent.parent
SECTIONS = ("check", "estimate", "oom_chain", "overhead", "tune")
# Each section's own limit on the GPU, in seconds: 270 in all, the 4.5 minutes one device call may
# spend on the plan (a start costs 1-2 of the session's 15 device minutes, and a rerun must fit).
# Measured on an H100 (bench/gpu/results/): check 12-14 s, estimate 38-67 s, a two-attempt chain
# 37-40 s (its first attempt 16-20 s) after a reading of the command that asks the installed
# transformers (about 10 s the first time), and 15 s reading the records back; each overhead run
# 14-19 s (imports and CUDA start-up, 100 steps: the section stops when its time runs low, and puts
# the variants that answer a question first); tune's trials are launches like the chain's (about
# 20 s each): its section asks for the divisors from 2 to 16 and lands in two or three.
LIMITS_S = {"check": 20, "estimate": 45, "oom_chain": 80, "overhead": 60, "tune": 65}
TOTAL_S = 270


class SectionSkipped(Exception):
    """The capability the section measures is missing here; the message is the reason."""


@dataclass
class Kit:
    """The plan's settings, shared by the sections (passed to each section's process as JSON)."""

    cpu: bool
    work: Path  # scratch space: profiles, run records, the jobs' outputs
    state: Path  # one JSON file per section, rewritten after every change
    pythonpath: str  # where gpudoc is imported from (the installed wheels, or this checkout)
    deadline: float = 0.0  # time.time() by which the section must be done

    @property
    def python(self) -> str:
        return sys.executable  # the job's interpreter: the machine's own torch, transformers and peft

    def env(self, **extra: str) -> dict[str, str]:
        # Records, the per-user project list and the simulation cache all in the kit's scratch space:
        # nothing of the user's is read or written, and every simulation runs cold.
        env = {**os.environ, "PYTHONPATH": self.pythonpath, "GPUDOC_HOME": str(self.work / "gpudoc-home"),
               "XDG_STATE_HOME": str(self.work / "xdg-state"), "XDG_CACHE_HOME": str(self.work / "xdg-cache"),
               "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **extra}
        env.pop("GPUDOC_PROFILE", None)
        return env

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.time())

    def gpudoc(self, *args: str, cwd: Path | None = None, timeout: float | None = None,
               env: dict[str, str] | None = None) -> Completed:
        return self.run([self.python, "-m", "gpudoc", *args], cwd=cwd, timeout=timeout, env=env)

    def job(self, script: str, *args: str, cwd: Path | None = None, timeout: float | None = None) -> Completed:
        return self.run([self.python, str(JOBS / script), *args], cwd=cwd, timeout=timeout)

    def run(self, argv: list[str], *, cwd: Path | None = None, timeout: float | None = None,
            env: dict[str, str] | None = None) -> Completed:
        """Run to completion within ``timeout`` (and the section's deadline); a process group of its
        own, ended whole at the limit, so nothing it started outlives the figure."""
        limit = min(timeout if timeout is not None else 1e9, self.remaining())
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env or self.env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            end_group(proc.pid)
            out, err = proc.communicate()
            timed_out = True
        return Completed(argv, proc.returncode, out, err, time.monotonic() - start, timed_out)

    def to_json(self) -> str:
        return json.dumps({"cpu": self.cpu, "work": str(self.work), "state": str(self.state),
                           "pythonpath": self.pythonpath, "deadline": self.deadline})

    @classmethod
    def from_json(cls, text: str) -> Kit:
        d = json.loads(text)
        return cls(d["cpu"], Path(d["work"]), Path(d["state"]), d["pythonpath"], d["deadline"])


@dataclass
class Completed:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    def json(self) -> dict:
        """The command's ``--json`` envelope; a failure names the command and what it printed."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise RuntimeError(f"{' '.join(self.argv[2:5])}: no JSON on stdout (exit {self.returncode}): "
                               f"{self.tail()}") from None

    def tail(self, chars: int = 400) -> str:
        text = (self.stderr or self.stdout).strip()
        return ("timed out; " if self.timed_out else "") + text[-chars:]


def end_group(pgid: int) -> None:
    """SIGTERM to the whole group, SIGKILL to what is left a moment later."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        until = time.monotonic() + wait
        while time.monotonic() < until:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@dataclass
class Result:
    """One section's figures; saved after every change so a limit that cuts the section keeps them."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def setdefault(self, key: str, default: Any) -> Any:
        value = self.data.setdefault(key, default)
        self.save()
        return value

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def error_summary(errors: list[float]) -> dict:
    """Median |error| and the count under-predicted by more than 10% (the dangerous side)."""
    return {"cases": len(errors), "median_abs_error": median([abs(e) for e in errors]),
            "under_by_more_than_10pct": sum(1 for e in errors if e < -0.10)}
