"""Find the newest complete checkpoint of a job, and the framework's own switch to resume from it.

Where each framework writes, what makes one complete (a save killed halfway must never be resumed
from) and its switch to resume are the framework's own (``gpudoc.frameworks``: ``checkpoints`` and
``resume_switch``); this module holds what they share.

Only checkpoints written since ``since`` (the chain's first launch) count: an older one may belong
to another experiment in the same folder. Nothing here imports torch or writes.

Resuming unpickles what the checkpoint holds, so what the framework would read is held to the trust
rule (``Checkpoint.problem``): every file of it the user's own and nobody else's to write, and no
link leading out of the output folder. Which run wrote it is the resume's question
(``gpudoc.commands.resume``): ``stamp`` is what a run records of each checkpoint it wrote.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoc.trust import Untrusted, owner_name, untrusted

# A file's modification time may be stamped a little before the run's recorded start (whole seconds).
_SLACK_S = 2.0
# The entries of one checkpoint the trust check looks at (a sharded DeepSpeed save holds a few
# hundred); past this many it is not resumed from rather than walked for minutes.
_MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class Checkpoint:
    framework: str
    path: str  # as the relaunched command names it (relative to the job's directory when inside it)
    step: int | None  # the optimizer step (torchtune: the epoch) it holds, when known
    unit: str = "step"

    def switch(self) -> tuple[str, ...]:
        """The tokens that resume from it, in the framework's own words."""
        from gpudoc.frameworks import registry

        adapter = registry.get(self.framework)
        return adapter.resume_switch(self.path) if adapter is not None else ()

    # Not part of what is recorded as resumed from: where it was found, to check and to stamp it.
    proof: Path | None = field(default=None, compare=False)  # the file whose writing completed the save
    within: Path | None = field(default=None, compare=False)  # the output folder it must not leave
    holds: tuple[Path, ...] = field(default=(), compare=False)  # what the framework reads to resume

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "path": self.path, self.unit: self.step, "switch": list(self.switch())}

    def stamp(self) -> dict[str, Any] | None:
        """What tells this save from any other written to the same path: its completing file's
        inode, size and modification time (None when it is gone)."""
        if self.proof is None:
            return None
        try:
            info = os.lstat(self.proof)
        except OSError:
            return None
        return {"path": self.path, "proof": str(self.proof), "ino": info.st_ino, "size": info.st_size,
                "mtime_ns": info.st_mtime_ns}

    def problem(self) -> Untrusted | None:
        """Why resuming from it would read what another user wrote, or None: each file and folder
        the framework reads must pass the trust rule, a link among them must end inside the output
        folder, and so must the checkpoint itself."""
        if self.within is None:
            return None
        problem = untrusted(self.within)  # the output folder itself, a link the user made to scratch included
        if problem is not None:
            return problem
        try:
            inside = self.within.resolve()
        except (OSError, RuntimeError):
            return None
        for seen, path in enumerate(self._entries()):
            if seen >= _MAX_ENTRIES:
                return Untrusted(Path(self.path), "unknown", f"holds more than {_MAX_ENTRIES} files to check",
                                 "resume from it by hand if you trust it")
            problem = untrusted(path) or _outside(path, inside, self.within)
            if problem is not None:
                return problem
        return None

    def _entries(self) -> Iterator[Path]:
        for held in self.holds:
            yield held
            if held.is_dir() and not held.is_symlink():
                for folder, dirs, files in os.walk(held):  # links are not descended into: each is checked
                    dirs.sort()
                    for name in (*dirs, *sorted(files)):
                        yield Path(folder) / name


def _outside(path: Path, inside: Path, within: Path) -> Untrusted | None:
    """A path that resolves outside the output folder (a link planted into another user's directory)."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        real = path
    if real == inside or inside in real.parents:
        return None
    try:
        owner = owner_name(os.lstat(path).st_uid)
    except OSError:
        owner = "unknown"
    return Untrusted(path, owner, f"(owner {owner}) leads out of the output folder {within}, to {real}",
                     "resume from a checkpoint inside the output folder")


def newest_checkpoint(framework: str | None, command: Sequence[str], cwd: Path, *,
                      since: float | None = None) -> Checkpoint | None:
    """The newest complete checkpoint the job's command says it writes; None when there is none."""
    found = written_checkpoints(framework, command, cwd, since=since)
    return found[0] if found else None


def written_checkpoints(framework: str | None, command: Sequence[str], cwd: Path, *,
                        since: float | None = None) -> list[Checkpoint]:
    """Every complete checkpoint the job's command says it writes, written since ``since``, the
    newest first."""
    from gpudoc.frameworks import registry
    from gpudoc.job.argv import parse_command

    adapter = registry.get(framework) if framework else None
    if adapter is None:
        return []
    return adapter.checkpoints(parse_command(list(command)).script_args, Path(cwd), since)


def resume_command(command: Sequence[str], switch: Sequence[str]) -> list[str]:
    """The command with the resume switch (``Checkpoint.switch()``) set: a value already there is
    replaced, else it is added at the end (the script's own arguments)."""
    if len(switch) == 2:
        return _set_flag(list(command), switch[0], switch[1])
    key = switch[0].partition("=")[0]
    kept = [tok for tok in command if tok.lstrip("+").partition("=")[0] != key]
    return [*kept, switch[0]]


# -- what the frameworks' layouts share (``gpudoc.frameworks``: each one's ``checkpoints``) --------

def flag(args: list[str], name: str) -> str | None:
    value = None
    for i, tok in enumerate(args):
        if tok == name and i + 1 < len(args):
            value = args[i + 1]
        elif tok.startswith(name + "="):
            value = tok.partition("=")[2]
    return value


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    out, i, found = [], 0, False
    while i < len(argv):
        tok = argv[i]
        if tok == flag and i + 1 < len(argv):
            out += [flag, value]
            i, found = i + 2, True
            continue
        if tok.startswith(flag + "="):
            out.append(f"{flag}={value}")
            found = True
        else:
            out.append(tok)
        i += 1
    return out if found else [*out, flag, value]


def load(path: Path) -> Any:
    """A config's data, or None: the job complains about a config it cannot read itself."""
    from gpudoc.edits import jsonedit, yamledit
    from gpudoc.errors import GpudocError

    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            return jsonedit.load(text, path.name)
        return yamledit.plain(yamledit.load(text, path.name))
    except (OSError, UnicodeDecodeError, GpudocError):
        return None


def config_value(path: Path, key: tuple[str, ...]) -> str | None:
    value = dig(load(path), key)
    return str(value) if value else None


def dig(data: Any, key: tuple[str, ...]) -> Any:
    for part in key:
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def whole(file: Path) -> bool:
    try:
        return zipfile.is_zipfile(file)
    except OSError:
        return False


def recent(path: Path, since: float | None) -> bool:
    try:
        return since is None or path.stat().st_mtime >= since - _SLACK_S
    except OSError:
        return False


def shown(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)
