"""Ask the installed framework for the job's configuration (``gpudoc/readhelper``), before launch.

The helper runs by path in the job's own interpreter, in a process group of its own with a time
limit, never in gpudoc's process; it imports the installed framework (Hydra's compose API,
torchtune's config loader), never the job's modules. Every way it can fail is an ``Unanswered``
whose text says why, for the one note of the hand-written reader that answers instead. Answers are
cached under ``$XDG_CACHE_HOME/gpudoc/read`` on (the interpreter, the request, the bytes of the
config files it may compose, the helper's code); an answer also names the files it read, and is
used only while their bytes are the ones it read.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpudoc.atomic import atomic_write_text
from gpudoc.errors import GpudocError
from gpudoc.helpercache import cache_dir, code_digest
from gpudoc.job.knobs import JobReading
from gpudoc.procs.bounded import run_bounded

HELPER = Path(__file__).resolve().parent.parent / "readhelper" / "run.py"
MARKER = "\x1egpudoc-reading "  # gpudoc.readhelper.main.MARKER (never imported here; a test holds them equal)
TIMEOUT_S = 30.0  # Hydra answers in a second or two; torchtune imports torch (seconds)
_MAX_FILES = 500  # a config directory holds tens of files: a home directory given as one is not read whole


_ANSWERED: dict[str, dict[str, Any]] = {}  # this process's answers, by cache key


class Unanswered(Exception):
    """The framework could not be asked; ``str(exc)`` says why."""


def _digest(paths: Iterable[Path]) -> dict[str, str]:
    out = {}
    for path in sorted(paths)[:_MAX_FILES]:
        try:
            if path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue
    return out


def ask(request: Mapping[str, Any], *, python: str, cwd: Path, files: Iterable[Path],
        environ: Mapping[str, str] | None = None, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The helper's answer (``ok`` true) to ``request``; ``files``: the config files it may read,
    whose bytes enter the cache key. Raises ``Unanswered``."""
    env = dict(os.environ if environ is None else environ)
    key = hashlib.sha256(json.dumps({"python": python, "request": dict(request), "files": _digest(files),
                                     "helper": code_digest(HELPER.parent)}, sort_keys=True).encode()).hexdigest()[:32]
    path = cache_dir(env, "read") / f"{key}.json"
    try:
        # This process's own answers first: a cache directory that cannot be written (a read-only
        # home) then still costs one helper run per reading, not one per command that reads it.
        cached = _ANSWERED.get(key) or json.loads(path.read_text(encoding="utf-8"))
        if cached.get("ok") and _digest(Path(p) for p in cached.get("read", {})) == cached.get("read"):
            return {**cached, "cached": True}
    except (OSError, ValueError, AttributeError):
        pass  # none, or not an answer: the framework is asked again
    env.update({"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    try:
        done = run_bounded([python, str(HELPER)], timeout_s=timeout_s, env=env, cwd=str(cwd),
                           input_text=json.dumps(dict(request)))
    except OSError as exc:
        raise Unanswered(f"the job's interpreter {python} cannot be run ({exc})") from None
    if done.timed_out:
        raise Unanswered(f"it did not answer within {timeout_s:g} s")
    answer = _answer(done.stdout)
    if answer is None:
        said = (done.stderr or "").strip().splitlines()
        raise Unanswered(f"its helper stopped ({said[-1][-200:] if said else f'exit status {done.returncode}'})")
    if not answer.get("ok"):
        raise Unanswered(str(answer.get("reason") or "no reason given"))
    answer["read"] = _digest(Path(p) for p in answer.get("read_files", ()))
    _ANSWERED[key] = answer
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(answer))  # never through a link planted where it goes
    except (GpudocError, OSError):
        pass  # a read-only cache only costs the next reading its time
    return answer


def _answer(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.split("\n")):  # not splitlines: the marker's \x1e is a line break to it
        if line.startswith(MARKER):
            try:
                found = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None



def settle(r: JobReading, answer: Mapping[str, Any], found: Iterable[tuple[str, Any, tuple[str, ...]]], name: str,
           *, package: str, how: str, unused: Mapping[str, str]) -> None:
    """A framework's own values (axolotl's, LLaMA-Factory's) over gpudoc's reading ``r`` of the same
    command: ``found`` holds (knob, value, the keys that say it), a key in the answer's ``given``
    being one the command or its file sets. Each knob stays where gpudoc's reader placed it, with the
    framework's value; one the job leaves to the framework takes the installed release's default;
    one gpudoc's reader left unknown (set in a form it cannot change) stays unknown. ``unused``: knobs
    the job does not have (no LoRA), and why. ``how``: what was asked, for the note that says so."""
    given = answer.get("given") or {}
    r.version = str((answer.get("versions") or {}).get(package) or "") or None
    for knob, value, keys in found:
        known = r.knobs.get(knob)
        if any(k in given for k in keys):
            if known is not None and known.kind != "default":
                r.set(knob, value, known.kind, known.name, known.path)
        elif known is None or known.kind == "default":
            r.set(knob, value, "default", name)
    for knob, why in unused.items():
        known = r.knobs.pop(knob, None)
        if known is not None:
            r.notes.append(f"{name}: {why}; {knob} {known.value} ({known.where}) is not the job's")
    r.notes.append(f"{name}: read by {package} {r.version or '?'} itself: {how}")
    r.notes.extend(f"{name}: {note}" for note in answer.get("notes") or ())
