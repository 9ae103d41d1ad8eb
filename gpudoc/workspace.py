"""The world one gpudoc command works in, built once at the CLI boundary and handed down.

Commands take a ``Workspace`` instead of reaching for ``os.environ``, ``Path.cwd()``,
``sys.stdin`` or a fresh ``RunStore()`` themselves, so that one rule answers each shared question
(where the runs live, which run is the latest, which runs are this profile's history) and tests
hand in a fake NVML, a captured console and a temporary directory instead of patching modules.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gpudoc.output import Console
from gpudoc.runs.store import RunStore

if TYPE_CHECKING:
    from gpudoc.estimate import Estimate
    from gpudoc.facts.model import Facts
    from gpudoc.facts.nvml import NvmlBackend
    from gpudoc.profiles.model import Profile
    from gpudoc.runs.record import RunRecord


@dataclass
class Workspace:
    """Where and with what a command runs: directory, environment, streams, NVML, run records."""

    cwd: Path = field(default_factory=Path.cwd)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    console: Console = field(default_factory=Console)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    # None: the real NVML (imported only when facts are gathered); tests pass a fake backend.
    nvml_backend: NvmlBackend | None = None

    def __post_init__(self) -> None:
        self.cwd = Path(self.cwd)

    @cached_property
    def store(self) -> RunStore:
        """The run records of this workspace (``$GPUDOC_HOME`` or ``./.gpudoc``); a runs directory
        passed over on the way (another user's) is said here, once, before the command uses the store."""
        store = RunStore.locate(self.cwd, self.environ)
        for note in store.located_notes:
            self.console.error(note)
        return store

    def but(self, *, cwd: Path | None = None, console: Console | None = None) -> Workspace:
        """The same workspace in another directory or talking through another console, keeping
        its run store (a relaunch in the recorded run's directory still records next to the run
        it retries; `run --clean` talks on stderr)."""
        changed = replace(self, cwd=Path(cwd) if cwd is not None else self.cwd, console=console or self.console)
        changed.__dict__["store"] = self.store  # cached_property: share it instead of locating again
        return changed

    def load_profile(self, name: str | None) -> Profile:
        """``-p NAME|FILE``, else ``$GPUDOC_PROFILE``, else ``./gpudoc.toml``, else no profile; a
        profile skipped by the trust rule is said on this workspace's console."""
        from gpudoc.errors import UsageError
        from gpudoc.profiles.loader import load_profile

        if name is not None and not name.strip():
            raise UsageError("-p: an empty profile name (name a profile or a file, or leave -p out)")
        return load_profile(name, self.cwd, say=self.console.error)

    def history(self, profile: Profile, *, upto: RunRecord | None = None) -> list[RunRecord]:
        """Earlier runs of this profile, oldest first: the one rule check, the run gate, estimate
        and fix use (see ``RunStore.history``)."""
        if profile.path is None and not _named(profile):
            return [upto] if upto is not None else []
        found = self.store.history(profile_path=profile.path, profile_name=_named(profile), upto=upto)
        if profile.job is not None and profile.job.command:
            # A tier read together with a command: many jobs share the tier, and one job's peaks
            # or tried rungs say nothing of another's. Only the runs of this command are its past.
            found = [r for r in found if tuple(r.command) == profile.job.command or (upto is not None and r.id == upto.id)]
        return found

    def gather(self, **kwargs: Any) -> Facts:
        """One facts snapshot through this workspace's NVML, environment and runs directory."""
        from gpudoc.facts.gather import gather_facts

        kwargs.setdefault("environ", self.environ)
        kwargs.setdefault("runs", self.store)
        return gather_facts(nvml_backend=self.nvml_backend, **kwargs)

    def estimate(self, profile: Profile, facts: Facts | None, *, python: str | None = None,
                 command: Sequence[str] | None = None) -> Estimate | None:
        """The estimator's figure for the job on these GPUs (measured runs included), or None when
        the profile does not describe the model. `check`, the run gate and `fix` all weigh this;
        with ``[estimate] simulate = true`` it is simulated in the job's interpreter (``python``,
        else the one ``command`` runs)."""
        if not profile.model:
            return None
        from gpudoc.errors import GpudocError
        from gpudoc.trust import Refused

        totals = [g.memory_total_bytes for g in (facts.gpus if facts is not None else ()) if g.memory_total_bytes]
        try:
            return self.estimator(profile, python=python, command=command)(
                profile, gpu_total_bytes=min(totals) if totals else None, history=self.history(profile))
        except Refused:
            raise  # code gpudoc will not run (a factory module another user can write) stops the command
        except GpudocError:
            return None

    def estimator(self, profile: Profile, *, simulate: bool = False, python: str | None = None,
                  command: Sequence[str] | None = None) -> Callable[..., Estimate]:
        """``estimate(profile, gpu_total_bytes=, history=)`` for this profile: the formula, or the
        simulation when asked (``simulate``) or set (``[estimate] simulate = true``)."""
        from gpudoc.estimate import estimate
        from gpudoc.estimate.simulated import SimulateOptions, simulate_enabled, simulated_estimate, timeout_of

        if not (simulate or simulate_enabled(profile)):
            return estimate
        options = SimulateOptions(python=self.job_python(profile, python=python, command=command),
                                  environ=self.environ, cwd=self.cwd, timeout_s=timeout_of(profile))
        return functools.partial(simulated_estimate, options=options)

    def job_python(self, profile: Profile, *, python: str | None = None,
                   command: Sequence[str] | None = None) -> str:
        """The interpreter the job runs: ``python``, else the one its command (or the latest run of
        this profile) would run, else ``python3`` on PATH."""
        from gpudoc.job.interpreter import target_python

        if python:
            return python
        return self.ran_python(profile, command) or target_python(["python3"], self.environ) or "python3"

    def ran_python(self, profile: Profile, command: Sequence[str] | None = None) -> str | None:
        """The interpreter ``command`` runs, else the one the latest run of this profile ran (the
        environment behind its ``uv run``/``conda run``, its venv's python); None when neither says."""
        from gpudoc.job.interpreter import target_python

        # Each command where it ran: an environment tool answers for the project it was started in.
        commands = [(command, str(self.cwd))] if command else []
        commands += [(r.command, r.cwd or str(self.cwd)) for r in reversed(self.history(profile)) if r.command][:1]
        for argv, cwd in commands:
            found = target_python(list(argv), self.environ, cwd)
            if found:
                return found
        return None


def _named(profile: Profile) -> str | None:
    """A profile's name when it is a real one (the empty stand-in for "no profile" has none)."""
    from gpudoc.profiles.model import EMPTY

    declared = any((profile.gpu, profile.env, profile.train, profile.launch, profile.model))
    return profile.name if profile is not EMPTY and (profile.path is not None or declared) else None
