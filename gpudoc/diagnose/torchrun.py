"""What torchrun itself says of a failed job: its report of the first failure, and its teardown.

torchrun (torch.distributed.elastic) ends a job whose worker failed in three steps, each printed:
it sends the other workers SIGTERM ("Sending process N closing signal SIGTERM"), logs the worker
that failed ("failed (exitcode: 2) local_rank: 1 (pid: P)"), and raises ChildFailedError, whose
report lists every worker's exit under "Failures:" and names the first one under "Root Cause (first
observed failure)": rank, host, exit code and, when the script's entry point is wrapped in
``@record``, its traceback. The worker's own output (its traceback, its error line) is the cause;
this report says which rank and how it exited when that output is missing (a worker that exited
without a word, or whose output went elsewhere); the SIGTERMs are consequences, never the cause.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.diagnose.lines import Line

_SUMMARY_RANK = re.compile(r"(?:^|\s)rank\s*:?\s*(\d+)", re.IGNORECASE)
_SUMMARY_HOST = re.compile(r"^host\s*:\s*(\S+)")
_EXIT = re.compile(r"exit\s?code\s*:?\s*(-?\d+)", re.IGNORECASE)
_PID = re.compile(r"\(pid:\s*(\d+)\)")
# The agent's own line, printed before the report: "failed (exitcode: 1) local_rank: 5 (pid: 59469)".
_AGENT_FAILED = re.compile(r"\bfailed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_TEARDOWN = re.compile(r"Sending process (\d+) closing signal SIGTERM")
# torchrun received a signal itself (Ctrl-C, a scheduler's SIGTERM) and passed it on: an outside stop.
_OUTSIDE = re.compile(r"Received \d+ death signal|SignalException")
ARGPARSE_EXIT = 2
_SIGTERM = 15


@dataclass(frozen=True)
class FirstFailure:
    """The worker torchrun names as the first to fail, and how it exited (negative: a signal)."""

    rank: int | None
    host: str | None
    exit_code: int | None
    pid: int | None
    index: int  # the line it was read from
    local: bool = False  # ``rank`` is the local rank (the agent's own line, not the report)

    @property
    def by_signal(self) -> bool:
        return self.exit_code is not None and self.exit_code < 0


def rank_and_host(text: str, rank: int | None, host: str | None) -> tuple[int | None, str | None]:
    """The first ``rank :`` and ``host :`` values of a torchrun report, one line at a time."""
    if rank is None:
        m = _SUMMARY_RANK.search(text)
        if m:
            rank = int(m.group(1))
    if host is None:
        h = _SUMMARY_HOST.match(text)
        if h:
            host = h.group(1)
    return rank, host


def entry_rank(lines: Sequence[Line], i: int) -> tuple[int | None, str | None]:
    """Rank and host of the torchrun report entry around line ``i`` (``rank : 7 (local_rank: 7)``)."""
    rank = host = None
    m = _SUMMARY_RANK.search(lines[i].text) or re.search(r"\blocal[_ ]rank\s*:?\s*(\d+)", lines[i].text)
    if m:
        rank = int(m.group(1))
    for j in range(i - 1, max(-1, i - 5), -1):
        t = lines[j].text
        rank, host = rank_and_host(t, rank, host)
        if re.match(r"^\[\d+\]:\s*$", t):  # start of this entry
            break
    return rank, host


def first_failure(lines: Sequence[Line]) -> FirstFailure | None:
    """The "Root Cause (first observed failure)" entry; without the report (a cut log), the agent's
    first "failed (exitcode: N) local_rank: R" line.

    The Root Cause is the first worker torchrun saw exit, and with ``@record`` the first whose error
    file it read: a worker killed by the teardown's SIGTERM can win that race. A SIGTERM is never the
    first failure while another entry of the report exited otherwise (argparse's 2, an exception's 1).
    """
    entries = _report(lines)
    if entries:
        root = next((entry for is_root, entry in entries if is_root), entries[-1][1])
        if root.exit_code == -_SIGTERM:
            root = next((entry for _, entry in entries if entry.exit_code not in (None, -_SIGTERM)), root)
        return root
    for i, line in enumerate(lines):
        m = _AGENT_FAILED.search(line.text)
        if m:
            return FirstFailure(int(m.group(2)), None, int(m.group(1)), int(m.group(3)), i, local=True)
    return None


def _report(lines: Sequence[Line]) -> list[tuple[bool, FirstFailure]]:
    """Each entry of torchrun's ChildFailedError report, with whether it is the Root Cause's."""
    entries: list[tuple[bool, FirstFailure]] = []
    in_root = False
    for i, line in enumerate(lines):
        text = line.text
        if text.startswith("Root Cause"):
            in_root = True
            if not any(re.match(r"^\[\d+\]:\s*$", ln.text) for ln in lines[i + 1:i + 3]):
                entries.append((True, _entry(lines, i)))  # a pasted report that lost its "[0]:" line
            continue
        if re.match(r"^\[\d+\]:\s*$", text):
            entries.append((in_root, _entry(lines, i)))
    return entries


def _entry(lines: Sequence[Line], i: int) -> FirstFailure:
    rank = host = code = pid = None
    for ln in lines[i + 1:i + 12]:
        if re.match(r"^(?:\[\d+\]:|[-=]{8,})\s*$", ln.text):
            break
        rank, host = rank_and_host(ln.text, rank, host)
        exit_ = _EXIT.search(ln.text)
        if exit_ and code is None:
            code = int(exit_.group(1))
            found = _PID.search(ln.text)
            pid = int(found.group(1)) if found else None
    return FirstFailure(rank, host, code, pid, i)


def teardown_pids(lines: Sequence[Line]) -> list[int]:
    """The workers torchrun sent SIGTERM while tearing the job down; none when torchrun was itself
    stopped from outside (then the SIGTERMs pass that stop on)."""
    if any(_OUTSIDE.search(line.text) for line in lines):
        return []
    return [int(m.group(1)) for line in lines if (m := _TEARDOWN.search(line.text))]


def launcher_said(first: FirstFailure | None, teardown: Sequence[int], lines: Sequence[Line],
                  exit_code: int | None) -> Diagnosis:
    """The diagnosis when the worker's own output says nothing: torchrun's report of the first
    failure, or, without one, only its teardown (a worker vanished without a word)."""
    pids = f"pid{'s' if len(teardown) > 1 else ''} {', '.join(map(str, teardown))}"
    stopped = f"; torchrun then stopped the other workers with SIGTERM ({pids})" if teardown else ""
    if first is None:
        return Diagnosis(
            cause="error", exit_code=exit_code, inferred=True, evidence=_line_of(lines, teardown),
            summary=(f"A worker of the job ended without an error of its own in this log{stopped}, its teardown: "
                     "a consequence. Look at that worker's own output (torchrun --log-dir, --redirects), and at "
                     "`dmesg` for the OOM killer, whose SIGKILL leaves no error behind."))
    who = f"{'Local rank' if first.local else 'Rank'} {first.rank}" if first.rank is not None else "A worker"
    if first.host:
        who += f" on {first.host}"
    how = " (how argparse refuses a command line)" if first.exit_code == ARGPARSE_EXIT else ""
    return Diagnosis(
        cause="error", exit_code=exit_code, rank=first.rank, host=first.host, pid=first.pid, inferred=True,
        evidence=lines[first.index].text[:500], line_number=lines[first.index].number + 1,
        summary=(f"{who} exited with status {first.exit_code}{how}, torchrun's first observed failure; its own "
                 f"error is not in this log{stopped}. Its output is in torchrun's --log-dir files, or add "
                 "@record to the script's entry point for its traceback."))


def _line_of(lines: Sequence[Line], pids: Sequence[int]) -> str | None:
    first = next((line.text for line in lines if _TEARDOWN.search(line.text)), None) if pids else None
    return first[:500] if first else None
