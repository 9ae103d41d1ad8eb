"""Ranks torchrun hides from the console still leave their output where gpudoc can read it.

``torchrun --local-ranks-filter 0`` shows only rank 0's output; a hidden rank that is not redirected
to a file writes nowhere (torchrun points its stdout and stderr at /dev/null, whatever ``--log-dir``
says). Its OOM is then only torchrun's "exitcode: 1". So gpudoc launches such a command with
``--redirects`` for each hidden rank (a rank's stdout and stderr to its own file, never to the
console) and, when the user gave none, a ``--log-dir`` in the run's folder. The ranks the filter
shows keep their console as it was: their redirects stay what the user wrote.

A pure function of the command line, applied at launch only: the run record keeps the command as
bound, so a relaunch rewrites it afresh for its own run folder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from gpudoc.job.argv import JobCommand, parse_command

# torchrun's per-rank mapping ("0:3,1:2") takes one digit per local rank: ranks 0-9.
_MAPPABLE = 10
_ALL = 3  # Std.ALL: stdout and stderr
_VALUE = re.compile(r"^[0-3]$")
_MAPPING = re.compile(r"^(\d:[0-3],)*\d:[0-3]$")


def with_hidden_rank_logs(argv: Sequence[str], log_dir: Path) -> list[str]:
    """``argv`` with ``--redirects`` for the ranks ``--local-ranks-filter`` hides (and ``--log-dir
    log_dir`` when it has none); unchanged when no rank is hidden or each already writes a file."""
    job = parse_command(argv)
    shown = _shown_ranks(job)
    if shown is None or job.options_end is None:
        return list(argv)
    nproc = job.options.get("--nproc-per-node", "--nproc_per_node")
    # "gpu", "auto": the count is decided on the node; any rank torchrun starts is below 10 here.
    local = min(int(nproc), _MAPPABLE) if nproc and nproc.isdigit() else _MAPPABLE
    redirects = _per_rank(job.options.get("--redirects", "-r"), local)
    tee = _per_rank(job.options.get("--tee", "-t"), local)
    if redirects is None or tee is None:
        return list(argv)  # a value torchrun itself refuses: it says so better
    hidden = [rank for rank in range(local) if rank not in shown and (redirects[rank] | tee[rank]) != _ALL]
    if not hidden:
        return list(argv)
    mapping = {**redirects, **dict.fromkeys(hidden, _ALL)}
    added = ["--redirects", ",".join(f"{rank}:{value}" for rank, value in sorted(mapping.items()))]
    if not job.options.has("--log-dir", "--log_dir"):
        added += ["--log-dir", str(log_dir)]
    at = job.options_end - 1 if job.options_end > 0 and argv[job.options_end - 1] == "--" else job.options_end
    return [*argv[:at], *added, *argv[at:]]


def _shown_ranks(job: JobCommand) -> frozenset[int] | None:
    """The local ranks ``--local-ranks-filter`` shows; None without a filter (or one torchrun refuses)."""
    if job.launcher != "torchrun":
        return None
    value = job.options.get("--local-ranks-filter", "--local_ranks_filter")
    parts = [part.strip() for part in (value or "").split(",")]
    if not value or not all(part.isdigit() for part in parts):
        return None
    return frozenset(int(part) for part in parts)


def _per_rank(value: str | None, local: int) -> dict[int, int] | None:
    """torchrun's ``--redirects``/``--tee`` value for each local rank (0: none), None if malformed."""
    if value is None:
        return dict.fromkeys(range(local), 0)
    if _VALUE.match(value):
        return dict.fromkeys(range(local), int(value))
    if _MAPPING.match(value):
        given = {int(rank): int(std) for rank, std in (item.split(":") for item in value.split(","))}
        return {rank: given.get(rank, 0) for rank in range(local)}
    return None
