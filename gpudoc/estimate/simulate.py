"""Run the simulation helper (``gpudoc/simhelper``) in the job's interpreter and read its answer.

gpudoc's own process never imports torch: the helper runs by path under ``PYTHON``, reads each spec
(a JSON line) on stdin and answers it with one line, with a time limit per question, no GPU
(``CUDA_VISIBLE_DEVICES=""``) and the Hugging Face offline switches; one helper answers every
question of an estimate (``HelperSession``). Every way it can fail is a ``SimulationUnavailable`` whose
message is the reason the formula answers instead. Answers are cached on (spec, library versions,
and for a ``[model] factory`` the project's code beside its module).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpudoc import helpercache
from gpudoc.atomic import atomic_write_text
from gpudoc.estimate.sim_answer import checked_answer, one_line
from gpudoc.procs.bounded import LineSession, Reply, run_bounded

HELPER = Path(__file__).resolve().parent.parent / "simhelper" / "run.py"
DEFAULT_TIMEOUT_S = 300.0
# What starts each answer line: ``gpudoc.simhelper.main.MARKER`` (the helper, run by path in the job's
# interpreter, is never imported here; a test holds the two equal).
MARKER = "\x1egpudoc-simulation "
_VERSIONS_TIMEOUT_S = 30.0
# Spec keys that decide the answer (the project directory only finds a factory's module, whose
# code enters the key through ``factory_code``).
_CACHE_EXCLUDES = ("cwd",)

_VERSIONS_CODE = r"""
import importlib.metadata as m, json, platform
out = {"python": platform.python_version()}
for name in ("torch", "transformers", "peft", "bitsandbytes", "torchtune", "torchao"):
    try:
        out[name] = m.version(name)
    except Exception:
        pass
print(json.dumps(out))
"""


class SimulationUnavailable(Exception):
    """The simulation could not answer; ``str(exc)`` says why, for the estimate's notes."""


def helper_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The job's environment with no GPU and no network for the model libraries."""
    env = dict(environ)
    env.update({"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1"})
    return env


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/gpudoc/simulate`` (default ``~/.cache/gpudoc/simulate``)."""
    return helpercache.cache_dir(environ, "simulate")


def library_versions(python: str, environ: Mapping[str, str]) -> dict[str, str]:
    """torch/transformers/peft, and the 4-bit libraries (whose layers and load the helper takes), as
    installed for ``python`` (package metadata; nothing imported)."""
    try:
        done = run_bounded([python, "-c", _VERSIONS_CODE], timeout_s=_VERSIONS_TIMEOUT_S,
                           env=helper_environment(environ))
    except FileNotFoundError:
        raise SimulationUnavailable(f"the job's interpreter {python} does not exist") from None
    except OSError as exc:
        raise SimulationUnavailable(f"the job's interpreter {python} cannot be run: {exc}") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
        if not isinstance(found, dict):
            raise ValueError(found)
    except (ValueError, IndexError):
        # The last line of its complaint: a note is one line, and a traceback ends with its cause.
        said = (done.stderr or "").strip().splitlines()
        raise SimulationUnavailable(f"the job's interpreter {python} did not answer as Python does: "
                                    f"{one_line(said[-1][-200:]) if said else 'no output'}") from None
    if "torch" not in found:
        raise SimulationUnavailable(f"no torch in the job's interpreter ({python})")
    return {k: str(v) for k, v in found.items()}


def _cache_key(spec: Mapping[str, Any], versions: Mapping[str, str], code: str | None) -> str:
    kept = {k: v for k, v in spec.items() if k not in _CACHE_EXCLUDES}
    text = json.dumps({"spec": kept, "versions": dict(versions), "helper": _helper_digest(),
                       "factory_code": code}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# How many of the project's Python files the trust check looks at before it stops looking: a
# project directory holds tens; a home directory used as one must not hold the estimate up.
_MAX_CHECKED_FILES = 2000


def check_factory_trust(factory: str, cwd: Path, environ: Mapping[str, str]) -> None:
    """Raise ``Refused`` when the simulation would import code another user owns or can write.

    The helper puts the project directory first on ``sys.path`` and then imports the factory's
    module, torch and the model libraries: every top-level module or package of the project
    directory can shadow them, and the factory's module, its packages and the files beside it
    are what it imports itself. Those found in the project directory or on the job's
    ``PYTHONPATH`` are held to the trust rule; installed packages are the user's installation.
    """
    from itertools import islice

    from gpudoc.trust import Refused, untrusted

    for path in islice(_factory_files(factory, cwd, environ), _MAX_CHECKED_FILES):
        problem = untrusted(path)
        if problem is not None:
            raise Refused(f"[model] factory = \"{factory}\": {problem}: refused, the simulation would import it "
                          f"as you ({problem.remedy})", file=str(path), key="model.factory")


def _factory_files(factory: str, cwd: Path, environ: Mapping[str, str]) -> Iterator[Path]:
    """The Python files of the project and the job's PYTHONPATH that importing ``factory`` can run
    (some may not exist: the rule has nothing to say of those)."""
    parts = [p for p in factory.partition(":")[0].split(".") if p]
    yield from _python_files(cwd, top_level=True)  # first on sys.path: they shadow torch and the libraries
    if not parts:
        return
    roots = [cwd, *(cwd / p for p in (environ.get("PYTHONPATH") or "").split(os.pathsep) if p)]
    for root in roots:
        if not ((root / parts[0]).is_dir() or (root / f"{parts[0]}.py").is_file()):
            continue
        folder = root
        for part in parts[:-1]:
            folder = folder / part
            yield folder / "__init__.py"
        module = folder / parts[-1]
        yield module.with_suffix(".py")
        yield module / "__init__.py"
        yield from _python_files(module, top_level=False)  # a package's model code
        yield from _python_files(folder, top_level=False)  # the model code beside the factory's module
        return  # the first root holding the top-level name is the one Python imports from


def _python_files(folder: Path, *, top_level: bool) -> Iterator[Path]:
    """``folder``'s ``*.py`` files, and with ``top_level`` its packages' ``__init__.py`` too."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.name.endswith(".py"):
            yield path
        elif top_level and entry.is_dir(follow_symlinks=False):
            yield path / "__init__.py"


def factory_code(factory: str, cwd: Path) -> str | None:
    """A digest of the code a ``[model] factory`` runs, as far as gpudoc sees it without importing
    it: the module's directory in the project (its path, and every Python file in it: the model code
    usually sits beside the factory). None when the module is not a file of the project (an installed
    package, whose changes gpudoc cannot see): such an answer is never cached."""
    base = cwd.joinpath(*factory.partition(":")[0].split("."))
    for module in (base.with_suffix(".py"), base / "__init__.py"):
        try:
            if not module.is_file():
                continue
            digest = hashlib.sha256(str(module.parent.resolve()).encode())
            for path in sorted(module.parent.glob("*.py")):
                if path.is_file():  # a FIFO or device named *.py would block or never end
                    digest.update(path.name.encode() + b"\0" + path.read_bytes())
        except OSError:
            return None
        return digest.hexdigest()[:16]
    return None


def _helper_digest() -> str:
    """The helper's own code is part of the answer: a changed helper never reads an old result."""
    return helpercache.code_digest(HELPER.parent)


class HelperSession:
    """The helper for one estimate, asked for each set of micro batches the estimate needs: started at
    the first question the cache cannot answer, kept running for the next (torch and the model
    libraries imported once), ended with its whole process group on ``close``. Each question has
    the time limit one simulation has (``timeout_s``: the profile's ``[estimate] timeout_s``, None
    when it sets none and the default applies)."""

    def __init__(self, *, python: str, environ: Mapping[str, str], cwd: Path, timeout_s: float | None = None,
                 use_cache: bool = True) -> None:
        self.python, self.environ, self.cwd = python, environ, cwd
        self.timeout_s, self.use_cache = timeout_s, use_cache
        self._versions: dict[str, str] | None = None
        self._session: LineSession | None = None

    def __enter__(self) -> HelperSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    def ask(self, spec: Mapping[str, Any]) -> dict:
        """The helper's result for ``spec`` (``ok`` is true), from the cache when the same spec ran
        under the same library versions (and the same factory code) before. Raises
        ``SimulationUnavailable`` with the reason."""
        if spec.get("factory"):
            check_factory_trust(str(spec["factory"]), self.cwd, self.environ)  # before any answer, a cached one too
        if self._versions is None:
            self._versions = library_versions(self.python, self.environ)
        versions = self._versions
        if spec.get("lora") and "peft" not in versions:
            raise SimulationUnavailable(f"lora_rank is set but peft is not installed in the job's interpreter "
                                        f"({self.python})")
        if spec.get("hf_config") is not None and "transformers" not in versions:
            raise SimulationUnavailable(f"transformers is not installed in the job's interpreter ({self.python})")
        code = factory_code(str(spec["factory"]), self.cwd) if spec.get("factory") else None
        use_cache = self.use_cache and (code is not None or not spec.get("factory"))
        path = cache_dir(self.environ) / f"{_cache_key(spec, versions, code)}.json"
        sizes = list(spec.get("micro_batch_sizes") or ())
        if use_cache:
            try:
                cached = checked_answer(json.loads(path.read_text(encoding="utf-8")), sizes)
                if cached.get("ok"):
                    return {**cached, "cached": True}
            except (OSError, ValueError):
                pass  # none, or not an answer (planted, cut short): the helper is asked again
        reply = self._helper().ask(json.dumps({**spec, "cwd": str(self.cwd)}),
                                   timeout_s=self.timeout_s or DEFAULT_TIMEOUT_S)
        if reply.timed_out:
            # Point to the setting only where it is not set already: a user who set it knows where it is.
            raise SimulationUnavailable(f"the simulation took longer than {DEFAULT_TIMEOUT_S:g} s, the default "
                                        "limit ([estimate] timeout_s raises it)" if self.timeout_s is None else
                                        f"the simulation took longer than {self.timeout_s:g} s, the limit "
                                        "[estimate] timeout_s sets")
        try:
            result = checked_answer(_parse(reply), sizes)
        except ValueError as exc:
            raise SimulationUnavailable(f"the simulation helper's answer {exc}") from None
        if not result.get("ok"):
            raise SimulationUnavailable(one_line(str(result.get("reason") or "the helper gave no reason")))
        if use_cache:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, json.dumps(result))
            except OSError:
                pass  # a read-only cache only costs the next estimate its time
        return result

    def _helper(self) -> LineSession:
        if self._session is None:
            try:
                self._session = LineSession([self.python, str(HELPER)], env=helper_environment(self.environ),
                                            cwd=str(self.cwd), marker=MARKER.encode(), limit=_ANSWER_BYTES)
            except OSError as exc:
                raise SimulationUnavailable(f"cannot run the job's interpreter {self.python}: {exc}") from None
        return self._session


def run_helper(spec: Mapping[str, Any], *, python: str, environ: Mapping[str, str], cwd: Path,
               timeout_s: float | None = None, use_cache: bool = True) -> dict:
    """One question to a helper of its own (``HelperSession.ask``)."""
    with HelperSession(python=python, environ=environ, cwd=cwd, timeout_s=timeout_s, use_cache=use_cache) as helper:
        return helper.ask(spec)


# The end of the helper's output that is read: its answer is the last line, a few kilobytes; a
# factory that prints hundreds of megabytes costs no more than this.
_ANSWER_BYTES = 1 << 20


def _parse(reply: Reply) -> Any:
    """The helper's answer line as JSON (any JSON: its shape is checked next)."""
    if reply.answer is not None:
        try:
            return json.loads(reply.answer)
        except ValueError:
            pass
    tail = (reply.stderr or "").strip().splitlines()
    why = one_line(tail[-1]) if tail else f"exit status {reply.returncode}, no answer"
    raise SimulationUnavailable(f"the simulation helper stopped: {why}")
