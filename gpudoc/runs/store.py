"""Where run records live and how they are written (atomically) and read back."""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator

from gpudoc import __version__
from gpudoc.atomic import atomic_write_text
from gpudoc.errors import InputError

RECORD = "run.json"
LOG = "output.log"
SAMPLES = "gpu.csv"


@dataclass
class RunRecord:
    """``run.json``: the SPEC's keys plus what gpudoc needs to clean up and retry.

    ``process_group`` and ``pids`` let a later ``gpudoc clean`` recognise leftovers of this run,
    with ``create_times`` guarding against PID reuse.
    """

    id: str
    command: list[str]
    cwd: str
    profile: dict | None = None
    env_set: dict[str, str] = field(default_factory=dict)
    file_edits: list[dict] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    status: str = "running"  # running | ok | failed | interrupted | refused
    cause: str | None = None
    diagnosis: dict | None = None
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)  # GPU index (str) -> bytes
    gpus: list[dict] = field(default_factory=list)  # {"index", "name", "total_bytes"}
    parent: str | None = None
    host: str = field(default_factory=socket.gethostname)
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
    survivors: list[int] = field(default_factory=list)  # PIDs that outlived even SIGKILL

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunRecord":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


# Clocks of different nodes disagree a little (the same allowance as the fail-fast markers).
JOB_CLOCK_SLACK_S = 5.0


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


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


_last_stamp_ms = 0


def new_run_id() -> str:
    """Sortable by start time to the millisecond (a retry starts within the same second as the
    failed attempt ends), unique across nodes sharing one GPUDOC_HOME.

    Within one process the stamp only moves forward, so ids made in the same millisecond still
    sort in creation order; the random suffix only separates ids from different hosts.
    """
    global _last_stamp_ms
    stamp_ms = max(int(time.time() * 1000), _last_stamp_ms + 1)
    _last_stamp_ms = stamp_ms
    seconds, millis = divmod(stamp_ms, 1000)
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(seconds)) + f"{millis:03d}-" + secrets.token_hex(3)


class RunStore:
    """The runs directory: ``$GPUDOC_HOME/runs`` or ``./.gpudoc/runs``."""

    def __init__(self, home: Path | None = None) -> None:
        if home is None:
            env_home = os.environ.get("GPUDOC_HOME")
            home = Path(env_home) if env_home else Path.cwd() / ".gpudoc"
        self.home = Path(home)
        self.root = self.home / "runs"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ignore = self.home / ".gitignore"
        if not ignore.exists():
            # Run records hold logs and environment values: keep them out of the user's commits.
            atomic_write_text(ignore, "# written by gpudoc: run records stay out of git\n*\n")

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def create(self, record: RunRecord) -> Path:
        self.ensure()
        directory = self.run_dir(record.id)
        directory.mkdir(parents=True, exist_ok=False)
        self.save(record)
        return directory

    def save(self, record: RunRecord) -> None:
        text = json.dumps(record.to_dict(), indent=2, sort_keys=False) + "\n"
        atomic_write_text(self.run_dir(record.id) / RECORD, text)

    def load(self, run_id: str) -> RunRecord:
        path = self.run_dir(run_id) / RECORD
        if not path.is_file():
            matches = [r for r in self.ids() if r.startswith(run_id)]
            if len(matches) == 1:
                path = self.run_dir(matches[0]) / RECORD
            elif len(matches) > 1:
                raise InputError(f"run id '{run_id}' is ambiguous: {', '.join(matches[:5])}")
            else:
                raise InputError(f"no run '{run_id}' in {self.root} (see `gpudoc runs`)")
        try:
            return RunRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise InputError(f"{path}: unreadable run record: {exc}") from None

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / RECORD).is_file())

    def records(self) -> Iterator[RunRecord]:
        """Oldest first; records that cannot be read are skipped (a run may be mid-write)."""
        for run_id in self.ids():
            try:
                yield self.load(run_id)
            except InputError:
                continue

    def job_records(self, job_id: str, *, attempt_of: RunRecord | None = None,
                    slack_s: float = JOB_CLOCK_SLACK_S) -> list[RunRecord]:
        """Records of one multi-node job (every node's, under a shared home), oldest first.

        ``attempt_of``: only the attempt that record belongs to. Engines reuse ids (a fixed
        ``--rdzv-id``, a requeued Slurm job), and one attempt's nodes run at the same time, so a
        record belongs to it when its run overlaps that record's run (give or take the clocks of
        different nodes); a record that a later one names as its ``parent`` was retried, so it is
        an earlier attempt too.
        """
        found = [r for r in self.records() if r.job_id == job_id]
        if attempt_of is None:
            return found
        start, end = self._span(attempt_of)
        if start is None:
            return [r for r in found if r.id == attempt_of.id] or [attempt_of]
        same = []
        for record in found:
            r_start, r_end = self._span(record)
            if record.id == attempt_of.id or (
                r_start is not None and r_start <= end + slack_s and r_end >= start - slack_s
            ):
                same.append(record)
        parents = {r.parent for r in same}
        same = [r for r in same if r.id not in parents or r.id == attempt_of.id]
        # Within the clock allowance an attempt that ended just before this one started still
        # overlaps. Two runs of the same node that did not run at the same time cannot both be
        # parts of one attempt: the earlier one is the older attempt.
        spans = {r.id: self._span(r) for r in same}
        kept = []
        for record in same:
            r_start, r_end = spans[record.id]
            superseded = any(
                other.id != record.id and other.host == record.host and other.node_rank == record.node_rank
                and spans[other.id][0] is not None and r_start is not None
                and spans[other.id][0] >= r_end
                for other in same
            )
            if not superseded or record.id == attempt_of.id:
                kept.append(record)
        return kept

    def _span(self, record: RunRecord) -> tuple[float | None, float]:
        """When a run started and ended. Stamps have whole seconds: the end is rounded up. A run
        with no end (still going, or its launcher was killed) lasted until its log or record was
        last written, not until now: a dead launcher must not pull an old attempt into a new one."""
        start = parse_iso(record.started_at)
        end = parse_iso(record.ended_at)
        if end is None:
            times = []
            for path in (self.log_path(record.id), self.run_dir(record.id) / RECORD):
                try:
                    times.append(path.stat().st_mtime)
                except OSError:
                    continue
            end = max(times) if times else (start if start is not None else time.time())
        return start, end + 1.0

    def latest(self) -> RunRecord | None:
        ids = self.ids()
        return self.load(ids[-1]) if ids else None

    def log_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / LOG

    def samples_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / SAMPLES
