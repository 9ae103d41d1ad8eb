"""Where run records live, how they are written (atomically) and read back, and which is which.

The one owner of the ``GPUDOC_HOME`` rule, of "the latest run" and of "the history of a profile":
every command asks this store instead of answering those questions itself.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoc.atomic import atomic_write_text
from gpudoc.errors import GpudocError, InputError
from gpudoc.runs.ids import RUN_ID, new_run_id
from gpudoc.runs.order import chronological, newest_window, second_of
from gpudoc.runs.tail import TAIL_BYTES, read_tail
from gpudoc.trust import untrusted
from gpudoc.upward import project_folders

if TYPE_CHECKING:
    from gpudoc.runs.owners import RunOwners
    from gpudoc.runs.record import RunRecord

__all__ = ["LOG", "RECORD", "SAMPLES", "RunStore", "new_run_id"]

RECORD = "run.json"
LOG = "output.log"
SAMPLES = "gpu.csv"


PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600
SHARED_DIR_MODE, SHARED_FILE_MODE = 0o750, 0o640

# Clocks of different nodes disagree a little (the same allowance as the fail-fast markers).
JOB_CLOCK_SLACK_S = 5.0

# What the questions about the past read: the newest runs. A home's ten-thousandth run teaches
# the estimate nothing the last few hundred do not, and reading them all would make every command
# slower with age. Older runs are still listed (`gpudoc runs`) and found by id.
HISTORY_WINDOW = 500

class StoreError(GpudocError):
    """The runs directory cannot be written (read-only, full, not a directory): one line naming it."""


class ForeignRecord(InputError):
    """A run record this user did not write (another owner, or a symlink): never trusted."""


class UnreadableRecord(InputError):
    """A ``run.json`` that is there but is not a record gpudoc wrote for that directory (bad JSON,
    a key of the wrong type, another run's record copied in): ``why`` says what is wrong."""

    def __init__(self, path: Path, why: str, *, key: str | None = None) -> None:
        super().__init__(f"{path}: unreadable run record: {why}", file=str(path), key=key)
        self.why = why


class RunStore:
    """The runs directory: ``$GPUDOC_HOME/runs``, else ``.gpudoc/runs`` under the working directory.

    A command builds one store (the workspace's) and asks it every question about the runs.
    """

    def __init__(self, home: Path, *, explicit: bool = False) -> None:
        self.home = Path(home)
        self.root = self.home / "runs"
        # $GPUDOC_HOME, named by the user: a team's shared home may be group-writable there.
        self.explicit = explicit
        # What ``locate`` passed over on its way here (another user's runs directory), one line each.
        self.located_notes: list[str] = []
        self._cache: dict[str, tuple[int, RunRecord]] = {}  # run id -> (run.json mtime, record)
        self.foreign: set[str] = set()  # ids of records another user wrote here: never read
        self.unreadable: dict[str, str] = {}  # ids of records skipped as unreadable -> why
        self._said: set[str] = set()  # the notes already said (``take_notes``)

    @classmethod
    def locate(cls, cwd: Path, environ: Mapping[str, str]) -> RunStore:
        """The one rule for where gpudoc keeps its runs: ``$GPUDOC_HOME``; else, like git, the
        nearest ``.gpudoc/runs`` from the working directory up, within the project (the search
        stops after a directory holding ``.git``) and below the user's home (never a stray
        ``~/.gpudoc`` for every project under it); else ``./.gpudoc``. A runs directory on the way
        that another user owns or can write (``gpudoc.trust``) is passed over, with one line in
        ``located_notes``: their records must not become this user's history, their "latest run"
        the one `fix --rerun` relaunches. The completion scripts and ``gpudoc.shellcomplete``
        follow the same rule."""
        home = environ.get("GPUDOC_HOME")
        if home:
            return cls(Path(home), explicit=True)
        here = Path(os.path.abspath(cwd))
        notes: list[str] = []
        for folder in map(Path, project_folders(here, environ)):
            if (folder / ".gpudoc" / "runs").is_dir():
                problem = untrusted(folder / ".gpudoc") or untrusted(folder / ".gpudoc" / "runs")
                if problem is None:
                    found = cls(folder / ".gpudoc")
                    found.located_notes = notes
                    return found
                notes.append(f"gpudoc: note: {problem}: its run records are not used ({problem.remedy})")
        fallback = cls(here / ".gpudoc")
        fallback.located_notes = notes
        return fallback

    def ensure(self, *, shared: bool | None = None) -> None:
        """The runs directory, made when missing; a StoreError when it is one gpudoc must not
        write into (another user's, or one others can write: ``gpudoc.trust``). Group-writable is
        fine for an explicit ``GPUDOC_HOME`` with ``[run] shared = true``; ``shared`` None: not
        known here (an edit's original kept beside the records), the team's home is taken as it is."""
        with _writing(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
        for folder in ([] if self.explicit else [self.home]) + [self.root]:
            problem = untrusted(folder, group_ok=self.explicit and shared is not False)
            if problem is not None:
                raise StoreError(f"{problem}: gpudoc will not keep run records there ({problem.remedy}, "
                                 f"or set GPUDOC_HOME to a directory of your own)", file=str(folder))
        with _writing(self.root):
            ignore = self.home / ".gitignore"
            if not ignore.exists():
                # Run records hold logs and environment values: keep them out of the user's commits.
                atomic_write_text(ignore, "# written by gpudoc: run records stay out of git\n*\n")

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def create(self, record: RunRecord, *, shared: bool = False) -> Path:
        """The run's directory, private to this user (0700, its files 0600) unless ``shared``
        (``[run] shared = true``: the group may read it too): a job's output and environment
        are nobody else's business on a shared box."""
        self.ensure(shared=shared)
        directory = self.run_dir(record.id)
        with _writing(directory):
            directory.mkdir(parents=True, exist_ok=False)
            os.chmod(directory, SHARED_DIR_MODE if shared else PRIVATE_DIR_MODE)  # exact, whatever the umask
        try:
            self.save(record)
        except StoreError:
            with suppress(OSError):
                directory.rmdir()  # no half-made run left behind (the atomic write left no file)
            raise
        return directory

    def file_mode(self, run_id: str) -> int:
        """The mode of the files in a run's directory: private unless the directory is shared."""
        try:
            shared = bool(self.run_dir(run_id).stat().st_mode & 0o070)
        except OSError:
            shared = False
        return SHARED_FILE_MODE if shared else PRIVATE_FILE_MODE

    def save(self, record: RunRecord) -> None:
        """Replace the record atomically: a failed write (a full disk) leaves the previous one whole."""
        text = json.dumps(record.to_dict(), indent=2, sort_keys=False) + "\n"
        path = self.run_dir(record.id) / RECORD
        with _writing(path):
            atomic_write_text(path, text, mode=self.file_mode(record.id))

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
        self._check_ours(path)
        from gpudoc.runs.record import RunRecord  # here: `gpudoc check` reads no record
        try:
            record = RunRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except OSError as exc:
            raise UnreadableRecord(path, exc.strerror or str(exc)) from None
        except ValueError as exc:  # not JSON, or not a record's layout (RecordError names the key)
            raise UnreadableRecord(path, str(exc), key=getattr(exc, "key", None)) from None
        if record.id != path.parent.name:
            # A record copied from another run's directory would send `logs`, `fix --rerun` or
            # `restore` to that other run's files under this run's name.
            raise UnreadableRecord(path, f"its id '{record.id}' is not its directory's name "
                                         f"(copied from another run?)", key="id")
        return record

    def _check_ours(self, path: Path) -> None:
        """gpudoc trusts only records it wrote: in a directory others can write (a team's
        GPUDOC_HOME), a planted record must not become "the latest run" that `fix --rerun` relaunches."""
        try:
            path.lstat()
        except OSError as exc:
            raise InputError(f"{path}: unreadable run record: {exc.strerror}") from None
        problem = untrusted(path, follow_links=False)
        if problem is not None:
            self.foreign.add(path.parent.name)
            raise ForeignRecord(f"{path}: not written by you, ignored: it {problem.why}")

    def require_readable(self) -> None:
        """Raise when the runs directory is there but cannot be listed (a file in its place, no
        permission): ``ids()`` answers "no runs" then, which would hide what is wrong."""
        try:
            os.scandir(self.root).close()
        except FileNotFoundError:
            return  # no runs yet
        except OSError as exc:
            raise InputError(f"{self.root}: cannot read the run records: {exc.strerror or exc}",
                             file=str(self.root)) from None

    def ids(self) -> list[str]:
        """Every run's id, oldest first: names only (ids sort by start time), no record read."""
        try:
            with os.scandir(self.root) as entries:
                return sorted(e.name for e in entries if not e.name.startswith("."))  # .jobs: the markers
        except OSError:
            return []

    def records(self, *, newest: int | None = None) -> Iterator[RunRecord]:
        """Oldest first, in the one order of runs (``gpudoc.runs.order``; only the ``newest`` so
        many runs, when given); records that cannot be
        read are skipped (``take_notes`` says which).

        Each ``run.json`` is parsed once per store and again only when it changed on disk, so a
        command that asks several questions of the history reads it once, and a long-lived store
        (a follower, a test) still sees runs that other processes wrote meanwhile.
        """
        ids = self.ids()
        loaded = (self.record_or_none(run_id) for run_id in (newest_window(ids, newest) if newest is not None else ids))
        ordered = chronological(record for record in loaded if record is not None)
        if newest is not None:
            ordered = ordered[-newest:] if newest > 0 else []
        return iter(ordered)

    def record_or_none(self, run_id: str) -> RunRecord | None:
        """The run's record, parsed once per store (again when it changed on disk); None when it
        is missing (a run directory mid-creation), unreadable (kept in ``unreadable``, said by
        ``take_notes``) or another user's (kept in ``foreign``)."""
        path = self.run_dir(run_id) / RECORD
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return None
        cached = self._cache.get(run_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            record = self.load(run_id)
        except UnreadableRecord as exc:
            self.unreadable[run_id] = exc.why
            return None
        except InputError:
            return None
        self.unreadable.pop(run_id, None)  # rewritten since: readable again
        self._cache[run_id] = (stamp, record)
        return record

    def owners(self) -> RunOwners:
        """Which run each process belongs to (see ``gpudoc.runs.owners``): the newest runs by
        dictionary; an older one through the run id its processes carry in their environment,
        checked against that run's own record."""
        from gpudoc.procs.identity import environ_value
        from gpudoc.runs.owners import RunOwners

        def named_run(pid: int) -> RunRecord | None:
            run_id = environ_value(pid, "GPUDOC_RUN_ID")
            return self.record_or_none(run_id) if run_id and RUN_ID.match(run_id) else None

        return RunOwners(self.records(newest=HISTORY_WINDOW), lookup=named_run)

    def named_or_latest(self, run_id: str | None) -> RunRecord:
        """The run ``run_id`` names (a unique prefix will do), or the latest when it is None: what
        `logs`, `watch` and `runs show` mean by their optional RUN_ID."""
        if run_id is not None:
            return self.load(run_id)
        if (latest := self.latest()) is None:
            self.require_readable()
            skipped = f"; {said}" if (said := self._skipped()) else ""
            raise InputError(f"no runs yet in {self.root} (start one with `gpudoc run -- COMMAND`){skipped}")
        return latest

    def latest(self) -> RunRecord | None:
        """The most recently started run: what `fix`, `logs` and `runs` mean by "the last run",
        the last of ``gpudoc.runs.order``'s order (the one `runs` lists). Only the newest second's
        records are read; only records this user wrote count."""
        newest: list[RunRecord] = []
        for run_id in reversed(self.ids()):  # from the newest, reading only the newest second
            if newest and second_of(run_id) != second_of(newest[0].id):
                break
            record = self.record_or_none(run_id)
            if record is not None:
                newest.append(record)
        return chronological(newest)[-1] if newest else None

    def foreign_note(self) -> str | None:
        """One line about records another user put here, when there are any (they were ignored)."""
        if not self.foreign:
            return None
        return (f"gpudoc: note: ignored {len(self.foreign)} run record(s) in {self.root} that you did not write "
                f"({', '.join(sorted(self.foreign)[:3])}{', ...' if len(self.foreign) > 3 else ''})")

    def unreadable_note(self) -> str | None:
        """One line about records skipped because they could not be read, when there are any: a
        command that quietly fell back to an older run would mislead."""
        said = self._skipped()
        return f"gpudoc: note: {said}" if said else None

    def _skipped(self) -> str:
        if not self.unreadable:
            return ""
        shown = "; ".join(f"{run_id}: {why}" for run_id, why in sorted(self.unreadable.items())[:3])
        return (f"skipped {len(self.unreadable)} unreadable run record(s) in {self.root} "
                f"({shown}{'; ...' if len(self.unreadable) > 3 else ''})")

    def take_notes(self) -> list[str]:
        """The notes about skipped records not said yet, each said once per store: at the end of
        the command (``gpudoc.cli.main``), or earlier by a command that must say it before going
        on (`logs -f` follows for hours)."""
        notes = [note for note in (self.foreign_note(), self.unreadable_note()) if note and note not in self._said]
        self._said.update(notes)
        return notes

    def history(self, *, profile_path: str | Path | None, profile_name: str | None,
                upto: RunRecord | None = None) -> list[RunRecord]:
        """Earlier runs of one profile among the newest ``HISTORY_WINDOW``, oldest first: what
        check, the run gate, estimate and fix learn from.

        A run belongs to the profile when both know its file and it is the same file; otherwise
        when the names agree. ``upto``: the run being fixed, always included, and nothing newer.
        """
        wanted = _resolved(profile_path)
        found = []
        for record in self.records(newest=HISTORY_WINDOW):
            theirs = _resolved(record.profile_path)
            same = theirs == wanted if wanted and theirs else (
                profile_name is not None and record.profile_name == profile_name)
            if same:
                found.append(record)
        if upto is not None and all(r.id != upto.id for r in found):
            found.append(upto)
        return found

    def log_tail(self, run_id: str, limit: int = TAIL_BYTES) -> str:
        return read_tail(self.log_path(run_id), limit)

    def log_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / LOG

    def samples_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / SAMPLES


def _resolved(path: str | Path | None) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return str(path)


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Around a write into the store: an OSError becomes a StoreError naming the path and why."""
    try:
        yield
    except OSError as exc:
        why = exc.strerror or str(exc)
        remedy = "free some space there, or" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise StoreError(f"{path}: cannot write gpudoc's run records: {why} "
                         f"({remedy} set GPUDOC_HOME to a writable directory)".replace("( ", "("),
                         file=str(path)) from None
