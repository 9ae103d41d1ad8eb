"""The diagnosis of a failed run, typed: what ``gpudoc.diagnose`` finds, what a run record keeps,
what the ladder and the renderers read.

The SPEC's keys are spelled here once (``SPEC_KEYS``); ``to_dict``/``from_dict`` are used only at
the edges (the run record, JSON output). Kept free of the log parser so the ladder can import it
without paying for the parser's regular expressions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

CAUSES = ("gpu_oom", "host_oom", "shm", "nccl_timeout", "signal", "error", "ok")
# Running out of memory of some kind, named by its own message: the strongest evidence there is.
MEMORY_CAUSES = frozenset({"gpu_oom", "host_oom", "shm"})
BACKENDS = ("cuda", "hip", "mps", "xla", "tensorflow", None)

# The SPEC's keys, in the SPEC's order; to_dict() emits these first, then the extras.
SPEC_KEYS = (
    "cause", "backend", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
    "reserved_unallocated_bytes", "other_processes", "gpu_index", "rank", "exit_code", "summary",
)


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong, where, and the memory figures the message gave (bytes, base 1024).

    ``cause`` is one of ``CAUSES``, or None while the run has not ended. ``summary`` is the one
    sentence that describes the failure: every renderer shows it, none writes its own.
    """

    cause: str | None
    summary: str
    backend: str | None = None
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    other_processes: tuple[tuple[int, int], ...] = ()  # (pid, bytes) of other processes on the GPU
    gpu_index: int | None = None
    rank: int | None = None
    exit_code: int | None = None
    # extras
    reserved_bytes: int | None = None  # allocated + reserved-but-unallocated
    this_process_bytes: int | None = None
    allowed_bytes: int | None = None  # set_per_process_memory_fraction / MPS watermark cap
    private_pools_bytes: int | None = None
    fragmentation: bool = False  # reserved-but-unallocated alone would cover the request
    inferred: bool = False  # the evidence is circumstantial (an exit status, a bare "Killed")
    peer_lost: bool = False  # the evidence is this rank losing another rank, whose own failure is elsewhere
    evidence: str | None = None  # the line the cause was read from
    line_number: int | None = None  # 1-based, in the log given
    failed_ranks: tuple[int, ...] = ()  # every rank with the same failure, in order seen
    signal: str | None = None
    host: str | None = None  # as the log names it (torchrun summary, NCCL line)
    node: str | None = None  # the label of the log (or node) it came from
    pid: int | None = None
    # Where it happened, when it came from a run record (fix across one job's nodes):
    node_rank: int | None = None
    run_id: str | None = None
    job_id: str | None = None

    # -- the cases that need no log ---------------------------------------------------------------

    @classmethod
    def ok(cls, exit_code: int = 0) -> Diagnosis:
        """No failure: the job exited 0 (an OOM it caught and survived is not a failure of the run)."""
        return cls(cause="ok", exit_code=exit_code, summary=f"No failure: the job exited {exit_code}.")

    @classmethod
    def still_running(cls, run_id: str) -> Diagnosis:
        return cls(cause=None, summary=f"Run {run_id} is still running (or its launcher died).")

    @classmethod
    def without_log(cls, cause: str, exit_code: int | None) -> Diagnosis:
        return cls(cause=cause, exit_code=exit_code, inferred=True,
                   summary=f"The run left no log to read; it ended with {cause} (exit {exit_code}).")

    def stopped_by_user(self, signal_name: str) -> Diagnosis:
        """This diagnosis of a run the user stopped (Ctrl-C, SIGTERM to gpudoc): cause ``signal``.

        A guess from the exit status alone (a SIGKILL "from the OOM killer") is no evidence here:
        gpudoc itself sent that signal, escalating the user's stop, so only what the job printed stays.
        """
        if self.inferred and self.signal:
            return replace(self, cause="signal", summary=f"Stopped by the user ({signal_name} to gpudoc): "
                                                         f"gpudoc ended the job with {self.signal}.")
        said = self.summary or ""
        if said[:1].isupper() and said[1:2].islower():  # "The job ...", mid-sentence now ("GPU 0 ..." stays)
            said = said[0].lower() + said[1:]
        summary = f"Stopped by the user ({signal_name} to gpudoc); {said}".strip()
        return replace(self, cause="signal", summary=summary)

    # -- questions ---------------------------------------------------------------------------------

    @property
    def other_processes_bytes(self) -> int:
        return sum(size for _, size in self.other_processes if size > 0)

    # -- the record / JSON edge --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The SPEC's keys first, in the SPEC's order, then the extras."""
        out: dict[str, Any] = {}
        for key in SPEC_KEYS:
            value = getattr(self, key)
            if key == "other_processes":
                value = [{"pid": pid, "bytes": size} for pid, size in value]
            out[key] = value
        for f in fields(self):
            if f.name not in out:
                value = getattr(self, f.name)
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Diagnosis | None:
        """Read a diagnosis back (a run record of any gpudoc version, a JSON file). Tolerant:
        unknown keys are ignored, a value of the wrong type becomes unknown, never a crash."""
        if not isinstance(data, Mapping):
            return None
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name == "other_processes":
                kwargs[f.name] = tuple(_pairs(value))
            elif f.name == "failed_ranks":
                kwargs[f.name] = tuple(v for v in value if _is_int(v)) if isinstance(value, (list, tuple)) else ()
            elif f.name in ("fragmentation", "inferred", "peer_lost"):
                kwargs[f.name] = value is True
            elif f.name.endswith(("_bytes", "_index", "_number")) or f.name in ("rank", "exit_code", "pid",
                                                                                  "node_rank"):
                kwargs[f.name] = int(value) if _is_int(value) else None
            elif f.name == "cause":
                kwargs[f.name] = value if value in CAUSES else ("error" if value is not None else None)
            else:
                kwargs[f.name] = str(value) if value is not None else None
        kwargs["summary"] = kwargs.get("summary") or ""
        kwargs.setdefault("cause", "error")
        return cls(**kwargs)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pairs(value: object) -> list[tuple[int, int]]:
    out = []
    for item in value if isinstance(value, (list, tuple)) else ():
        if isinstance(item, Mapping) and _is_int(item.get("pid")) and _is_int(item.get("bytes")):
            out.append((int(item["pid"]), int(item["bytes"])))
    return out
