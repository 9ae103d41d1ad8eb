"""``run.json``: one run's record, and the typed questions other rooms ask of it.

Other rooms read a record through the accessors below (``knobs``, ``peak_bytes``,
``succeeded``, ...) instead of reaching into its dicts, so the record's layout has one owner.
"""

from __future__ import annotations

import os
import time
import typing
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

from gpudoc import __version__
from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.jsonshape import field_types, is_union, shown

# What a run ended as: running | ok | failed | interrupted | refused
RUNNING = "running"


@dataclass
class RunRecord:
    """``run.json``: the SPEC's keys plus what gpudoc needs to clean up and retry.

    ``process_group`` and ``pids`` let a later ``gpudoc clean`` recognise leftovers of this run,
    with their ``create_time`` guarding against PID reuse.
    """

    id: str
    command: list[str]
    cwd: str
    profile: dict | None = None
    env_set: dict[str, str] = field(default_factory=dict)
    file_edits: list[dict] = field(default_factory=list)
    # Files gpudoc changed after this run for the next attempt (`fix --apply`, `--retry-oom` on a
    # profile): each ``gpudoc.runs.edits.entry``, what it changed from what.
    applied_edits: list[dict] = field(default_factory=list)
    # The checkpoint this run resumed from ({"framework", "path", "step", "switch"}), when it did.
    resumed_from: dict | None = None
    # The checkpoints written while this run ran ({"path", "proof", "ino", "size", "mtime_ns"}): the
    # only ones a relaunch of its chain resumes from (``gpudoc.commands.resume``).
    checkpoints: list[dict] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    status: str = RUNNING
    cause: str | None = None
    diagnosis: Diagnosis | None = None
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)  # GPU index (str) -> bytes
    gpus: list[dict] = field(default_factory=list)  # {"index", "name", "total_bytes"}
    parent: str | None = None
    trial_of: str | None = None  # the `gpudoc tune` this short trial run belongs to
    host: str = field(default_factory=lambda: os.uname().nodename)  # socket.gethostname(), without socket
    job_id: str | None = None
    # Which node of a multi-node job this was (Slurm's node id, torchrun's group/node rank), when
    # the engine says: one job's nodes often share a host name in tests and containers.
    node_rank: int | None = None
    gpudoc_version: str = __version__
    launcher_pid: int | None = None
    process_group: int | None = None
    pids: list[dict] = field(default_factory=list)  # {"pid", "create_time"} of the job's processes
    user: str | None = None
    # The launcher's account of the run (beyond the SPEC's keys):
    argv: list[str] = field(default_factory=list)  # what was launched: command after bindings
    # gpudoc run's own switches (--no-check, --force, ...): `fix --rerun` relaunches as the user did.
    run_switches: list[str] = field(default_factory=list)
    ended_by: str | None = None  # set when gpudoc ended the job itself, e.g. "gpu_oom" (fail-fast)
    terminal_lost: bool = False  # the terminal went away mid-run (the log is still complete)
    log_error: str | None = None  # why output.log is incomplete, when it is
    samples_error: str | None = None  # why gpu.csv stops early (NVML failed mid-run, a full disk)
    worker_ranks: dict[str, int] = field(default_factory=dict)  # PID -> RANK its environment gave it
    rank_logs: dict[str, list[str]] = field(default_factory=dict)  # local rank -> torchrun's --log-dir files
    survivors: list[int] = field(default_factory=list)  # PIDs that outlived even SIGKILL
    # Did this relaunch's knob changes reach the job (``gpudoc.ladder.arrival``)? {"missing", "confirmed"}
    arrival: dict | None = None
    # What the probe inside the job saw (``gpudoc.runs.probe``): the knobs it trained with, its steps,
    # and what filled the memory at an OOM; None where nothing was observed.
    observed: dict | None = None
    steps: dict | None = None
    oom: dict | None = None
    # OOMs the job went on from itself (a smaller batch): {"rank", "step", "phase", "micro_batch_size",
    # "went_on_with", "times"}; the run is not failed by them.
    oom_recovered: dict | None = None
    # The argument parsers the job used ({"prog", "type", "options", "values"}): the flags it declares.
    parsers: list[dict] | None = None
    probe_errors: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis is not None else None
        return doc

    @classmethod
    def from_dict(cls, data: Any) -> RunRecord:
        """A record read back from ``run.json``. Keys a newer gpudoc added are ignored; a known key
        holding the wrong type raises ``RecordError`` naming it: every command reads records, and
        `fix --rerun` relaunches one's command, so a damaged or hand-made record is refused here,
        once, instead of crashing whichever command touches the field first. The diagnosis keeps
        its own tolerance (``Diagnosis.from_dict``)."""
        if not isinstance(data, dict):
            raise RecordError(f"expected a JSON object, found {shown(data)}")
        types_ = field_types(RunRecord)
        for name in _REQUIRED:
            if name not in data:
                raise RecordError(f"missing key '{name}'", key=name)
        for name, value in data.items():
            hint = types_.get(name)
            if hint is not None and name != "diagnosis" and not _fits(value, hint):
                raise RecordError(f"key '{name}' holds {shown(value)}, expected {_spelled(hint)}", key=name)
        record = cls(**{k: v for k, v in data.items() if k in types_ and k != "diagnosis"})
        record.diagnosis = Diagnosis.from_dict(data.get("diagnosis"))
        return record

    def take_observations(self, seen: Mapping[str, Any]) -> None:
        """What the probe saw (``gpudoc.runs.probe.read``): observed, steps, oom (and those the job went
        on from), parsers, probe_errors."""
        for key in ("observed", "steps", "oom", "oom_recovered", "parsers", "probe_errors"):
            setattr(self, key, seen.get(key))

    # -- what other rooms ask of a record ------------------------------------------------------

    @property
    def launched(self) -> list[str]:
        """What ran: ``argv`` (the command after gpudoc bound the knobs into it, or the next rung's
        arguments on a retry) when recorded, else the user's ``command``."""
        return list(self.argv or self.command)

    @property
    def profile_path(self) -> str | None:
        path = (self.profile or {}).get("path")
        return str(path) if path else None

    @property
    def profile_name(self) -> str | None:
        name = (self.profile or {}).get("name")
        return str(name) if name else None

    @property
    def knobs(self) -> dict[str, Any]:
        """The knobs the run was launched with (older records kept them under ``train``; a job read
        from its command keeps ``{"value", "where"}`` per knob)."""
        profile = self.profile or {}
        knobs = dict(profile.get("knobs") or profile.get("train") or {})
        return {k: v["value"] if isinstance(v, dict) and "where" in v else v for k, v in knobs.items()}

    @property
    def knob_places(self) -> dict[str, str]:
        """Where each knob of a job read from its command lives (``argv:--flag``, ``file:PATH:key``)."""
        knobs = dict((self.profile or {}).get("knobs") or {})
        return {k: str(v["where"]) for k, v in knobs.items() if isinstance(v, dict) and "where" in v}

    @property
    def launch(self) -> dict[str, Any]:
        return dict((self.profile or {}).get("launch") or {})

    @property
    def env(self) -> dict[str, str]:
        """The environment the profile asked for, with what gpudoc really set on top."""
        env = dict((self.profile or {}).get("env") or {})
        env.update(self.env_set or {})
        return env

    @property
    def peak_bytes(self) -> int | None:
        """The highest peak of any GPU, or None when nothing was sampled."""
        peaks = [int(v) for v in (self.peak_memory_bytes or {}).values()
                 if isinstance(v, (int, float)) and v > 0]
        return max(peaks) if peaks else None

    @property
    def gpu_totals(self) -> dict[str, int]:
        """GPU index (str, as in ``peak_memory_bytes``) -> capacity in bytes."""
        return {str(g.get("index")): int(g["total_bytes"]) for g in self.gpus or ()
                if isinstance(g, dict) and g.get("total_bytes")}

    @property
    def gpu_names(self) -> list[str]:
        return [str(g["name"]) for g in self.gpus or () if isinstance(g, dict) and g.get("name")]

    @property
    def only_worker_rank(self) -> int | None:
        """The RANK of the run's only worker, when it had exactly one (one process per node)."""
        ranks = {rank for rank in self.worker_ranks.values() if isinstance(rank, int)}
        return ranks.pop() if len(ranks) == 1 else None

    @property
    def job_pids(self) -> list[int]:
        return [int(p["pid"]) for p in self.pids or () if isinstance(p, dict) and p.get("pid")]

    @property
    def diagnosed_cause(self) -> str | None:
        """The cause, from the record's own field or else its diagnosis."""
        if self.cause:
            return self.cause
        return self.diagnosis.cause if self.diagnosis is not None else None

    @property
    def succeeded(self) -> bool:
        return self.status == "ok" or (self.exit_code == 0 and self.cause in (None, "ok"))

    @property
    def oom_retryable(self) -> bool:
        """A GPU OOM the user did not stop: what `--retry-oom` relaunches with the next rung."""
        return self.cause == "gpu_oom" and self.status != "interrupted"

    @property
    def failed_oom(self) -> bool:
        return self.diagnosed_cause == "gpu_oom"

    @property
    def finished(self) -> bool:
        return self.status != RUNNING

    @property
    def started_epoch(self) -> float | None:
        return parse_iso(self.started_at)

    @property
    def ended_epoch(self) -> float | None:
        return parse_iso(self.ended_at)


class RecordError(ValueError):
    """A ``run.json`` that is not the record gpudoc writes: the message (and ``key``) say where."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


_REQUIRED = tuple(f.name for f in fields(RunRecord) if f.default is MISSING and f.default_factory is MISSING)


def _fits(value: Any, hint: Any) -> bool:
    """Does a JSON value have the annotated type (and, for lists and dicts, do its elements)?"""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if is_union(hint):
        return any(_fits(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    if hint is float:  # JSON has one number type: 12 is a fine duration
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:  # True is an int to Python, not to a record
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def _spelled(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if is_union(hint):
        return " or ".join(_spelled(arg) for arg in typing.get_args(hint))
    if typing.get_args(hint):  # list[str]: its element types too (3.9 also calls it a type)
        return str(hint).replace("typing.", "")
    return hint.__name__ if isinstance(hint, type) else str(hint)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def parse_iso(stamp: str | None) -> float | None:
    """``now_iso()`` back to epoch seconds; None for a missing or foreign stamp."""
    if not stamp:
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        try:
            return datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            return None


def live_status(record: RunRecord, *, hostname: str | None = None) -> str:
    """The record's status, except that a "running" run whose gpudoc is gone is "lost"."""
    if record.status != RUNNING or record.launcher_pid is None:
        return record.status
    if record.host not in (hostname or os.uname().nodename, None):
        return RUNNING  # another node's run: cannot look at its processes from here
    try:
        os.kill(record.launcher_pid, 0)
    except ProcessLookupError:
        return "lost"
    except PermissionError:
        pass
    return RUNNING


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, before's value, after's value)`` for every key whose value differs, sorted by key; a
    key one side lacks is None there. How two runs' knobs, environment or edits differ."""
    return [(key, before.get(key), after.get(key)) for key in sorted(set(before) | set(after))
            if before.get(key) != after.get(key)]
