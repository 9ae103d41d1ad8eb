"""Where run records live and how they are written (atomically) and read back."""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
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
    gpudoc_version: str = __version__
    launcher_pid: int | None = None
    process_group: int | None = None
    pids: list[dict] = field(default_factory=list)  # {"pid", "create_time"} of the job's processes
    user: str | None = None
    # The launcher's account of the run (beyond the SPEC's keys):
    argv: list[str] = field(default_factory=list)  # what was launched: command after bindings
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

    def latest(self) -> RunRecord | None:
        ids = self.ids()
        return self.load(ids[-1]) if ids else None

    def log_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / LOG

    def samples_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / SAMPLES
