"""`gpudoc run --wait[=SECONDS]`: when the pre-flight fails only because the job's GPUs lack free
memory (another user's job, a notebook), wait for it instead of refusing.

Every ``POLL_S`` the facts are gathered and the checks run again, exactly as the gate runs them;
one status line says what is missing and who holds it (refreshed in place on a terminal, written
again only when it changes otherwise). Once the memory is free the bell rings and the job starts;
at the limit gpudoc refuses as the gate would (exit 125), naming the holders it saw last. A failed
check that waiting cannot fix (another check, a card smaller than the job) refuses at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from gpudoc.checks.memory import FREE_MEMORY
from gpudoc.errors import ExitStatus, LaunchError, UsageError
from gpudoc.findings import Finding, Severity
from gpudoc.units import format_duration

POLL_S = 5.0

Gate = Callable[[], "tuple[object, Sequence[Finding], bool]"]  # facts, findings, whether freeing helps


def wait_limit(value: str | None) -> float | None:
    """``--wait``'s value in seconds (``inf``: no limit); None when not given."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:  # also NaN
        raise UsageError(f"--wait: expected a number of seconds, got {value!r} (--wait alone waits as long as it "
                         "takes)", exit_status=ExitStatus.LAUNCH_REFUSED)
    return seconds


def waitable(findings: Sequence[Finding], freeing_helps: bool) -> bool:
    """Only free memory is missing, and freeing it is enough."""
    failed = [f for f in findings if f.severity is Severity.FAIL]
    return bool(failed) and freeing_helps and all(f.id == FREE_MEMORY for f in failed)


def wait_for_memory(gate: Gate, limit_s: float, err: TextIO, *, poll_s: float | None = None,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> tuple[object, Sequence[Finding]]:
    """Run ``gate`` until no check fails or waiting stops helping; the last facts and findings.
    At ``limit_s`` it raises the gate's refusal with what it saw last."""
    poll_s = POLL_S if poll_s is None else poll_s
    started = clock()
    tty = _isatty(err)
    shown = ""
    while True:
        facts, findings, helps = gate()
        if not waitable(findings, helps):
            if tty and shown:
                err.write("\n")
            if not any(f.severity is Severity.FAIL for f in findings):
                err.write(f"\agpudoc: --wait: the memory is free after {format_duration(clock() - started)}: "
                          "launching\n")
                err.flush()
            return facts, findings
        waited = clock() - started
        line = f"gpudoc: --wait: {status(findings)} (waiting {format_duration(waited)}" + (
            f" of {format_duration(limit_s)})" if math.isfinite(limit_s) else ")")
        if waited >= limit_s:
            if tty and shown:
                err.write("\n")
            raise LaunchError(f"--wait: gave up after {format_duration(limit_s)}: {status(findings)}")
        if tty:
            err.write("\r\x1b[K" + line)
        elif line.split(" (waiting")[0] != shown.split(" (waiting")[0]:
            err.write(line + "\n")
        err.flush()
        shown = line
        sleep(min(poll_s, max(0.0, limit_s - waited)))


def status(findings: Sequence[Finding]) -> str:
    """What is missing, GPU by GPU, with who holds it: the failed checks' own words."""
    failed = [f for f in findings if f.severity is Severity.FAIL and f.id == FREE_MEMORY]
    return "; ".join(f.title + (f" — {'; '.join(f.holders)}" if f.holders else "") for f in failed)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
