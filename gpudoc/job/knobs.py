"""The one reader of a job's knobs: what its command line and the config files it names say.

With no profile, this is all `gpudoc run` and `gpudoc fix` know of the job: each knob's value and
the one place that wins (a flag over the config file it overrides; the file when no flag says
otherwise; the framework's own default when neither does), world size and node count from the
launcher. A reading also says how to write a changed knob back to where it lives: the ``[bind]``
table a profile describing this job would have, so the planner (``gpudoc.bind``) edits the very
place the value came from. Reading never writes and never fails on the job's behalf: a config it
cannot read is a note, not an error (the job will say so itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoc.configvalues import format_value, placeholder
from gpudoc.errors import InputError, ProfileError
from gpudoc.job.argv import parse_command
from gpudoc.job.identity import world
from gpudoc.profiles.schema import RANGES


@dataclass(frozen=True)
class Knob:
    """A knob's value and where it lives: on the command line (``name`` is the flag, or the key of
    a ``key=value`` override), in a file (``name`` is its dotted key, empty where a preset knows
    the key), or nowhere yet (``name`` is the framework whose default it is)."""

    value: Any
    kind: str  # "argv" | "file" | "default"
    name: str
    path: str | None = None

    @property
    def where(self) -> str:
        """``argv:--flag``, ``argv:key``, ``file:PATH:dotted.key``, ``file:PATH``, ``default:FRAMEWORK``."""
        if self.kind == "file":
            return f"file:{self.path}:{self.name}" if self.name else f"file:{self.path}"
        return f"{self.kind}:{self.name}"


@dataclass
class JobReading:
    """What the command says. ``launch`` holds ``nproc_per_node``/``nnodes`` when the launcher fixes
    them; ``file_presets`` names the preset that knows the keys of a ``file:PATH`` knob (empty: the
    framework's argument preset reaches that file itself, as the HF Trainer does its DeepSpeed JSON).
    ``home``: the config file (read by its preset) that takes a knob the job leaves at its default,
    for CLIs that read one file (axolotl, LLaMA-Factory); None: the framework's flags take it.
    ``named_by``: a file another names (a ``deepspeed:`` JSON in a YAML) -> that file, whose preset
    writes it, following it as the framework does."""

    framework: str | None = None
    knobs: dict[str, Knob] = field(default_factory=dict)
    launch: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    file_presets: dict[str, str] = field(default_factory=dict)
    home: str | None = None
    named_by: dict[str, str] = field(default_factory=dict)
    # The config files read, as (label, data): the model the job names may be in one of them.
    config_data: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    # The command read, as the user gave it: which recorded runs are this job's.
    command: tuple[str, ...] = ()
    # The framework's release installed for the job's interpreter, where its adapter asked (TRL's
    # defaults, Lightning's precision spelling depend on it); None: not asked or not found.
    version: str | None = None
    # The flags the framework's installed parser declares, where it was asked (HfArgumentParser,
    # TrlParser): a flag outside them is never written. None: not asked, every flag it knows is written.
    declared: frozenset[str] | None = None
    # Where the job spells a knob's values otherwise than the profile at the place it lives (a Hydra
    # config's Lightning Trainer takes ``bf16-mixed``, or ``bf16`` before 2.0, for bf16): knob ->
    # {the profile's value: the job's}, written there through a value map.
    spellings: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, Any]:
        return {name: knob.value for name, knob in self.knobs.items()}

    @property
    def places(self) -> dict[str, str]:
        return {name: knob.where for name, knob in self.knobs.items()}

    def read_bindings(self, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Each knob read, in ``run --dry-run``'s form of a binding: ``file`` is "command" for a flag
        or an override, the config file's path, or None for the framework's default (no place yet);
        ``old`` is the job's value, ``new`` the one in ``values``; ``where`` as the run record says it."""
        out = []
        for knob, place in self.knobs.items():
            file = "command" if place.kind == "argv" else place.path if place.kind == "file" else None
            out.append({"knob": knob, "file": file, "key": (place.name or None) if file else None, "old": place.value,
                        "new": values.get(knob, place.value), "added": False, "where": place.where})
        return out

    def set(self, knob: str, value: Any, kind: str, name: str, path: str | None = None) -> None:
        """Later readings win: readers call this in the order the job itself applies its sources.
        A count no framework can train with (``"eight"``, ``8.5``, ``0``, ``1e30``) is an error naming
        where it is said: the framework's default is not what the job runs with, and the estimate and
        the ladder must not compute with it. None, ``"auto"`` and ``${...}`` say no value."""
        if value is None or placeholder(value):
            return
        if knob in COUNT_BOUNDS and not is_count(knob, value):
            bounds = COUNT_BOUNDS[knob]
            said = f"{name} {value}" if kind == "argv" and name.startswith("-") else \
                f"{name}={value}" if kind == "argv" else f"{path}: {name or knob} = {value!r}"
            raise InputError(f"{said}: expected a whole number from {bounds[0]} to {bounds[1]}",
                             file=path, key=name or knob)
        self.knobs[knob] = Knob(value, kind, name, path)

    def bindings(self, knobs: Iterable[str]) -> dict[str, Any]:
        """The ``[bind]`` table that writes ``knobs`` where each lives (and nowhere else)."""
        from gpudoc.frameworks.registry import takes_own_flags

        own_flags = takes_own_flags(self.framework)
        args_knobs: list[str] = []
        files: dict[str, Any] = {}
        overrides: dict[str, Any] = {}
        flags: dict[str, str] = {}
        for knob in sorted(knobs):
            place = self.knobs.get(knob)
            if (place is None or place.kind == "default") and self.home is not None:
                files[self.home] = self.file_presets[self.home]
            elif place is not None and place.kind == "argv" and place.name.startswith("-") \
                    and not own_flags:
                flags[knob] = place.name  # a flag of the script's own parser (seen by the probe)
            elif place is None or place.kind == "default" or (place.kind == "argv" and place.name.startswith("-")):
                args_knobs.append(knob)
            elif place.kind == "argv":
                if own_flags:
                    args_knobs.append(knob)  # torchtune's own override keys: its preset knows them
                else:
                    overrides[knob] = self._spelled(knob, place.name)
            elif place.path is not None:
                path = self.named_by.get(place.path, place.path)
                preset = self.file_presets.get(path)
                if preset == "" or (preset is None and not place.name):
                    args_knobs.append(knob)
                elif preset:
                    files[path] = preset
                else:
                    spec = files.setdefault(place.path, {})
                    spec[knob] = self._spelled(knob, place.name)
        bind: dict[str, Any] = {"env": False}
        if args_knobs:
            if not own_flags:
                raise ProfileError(f"the command has no place for {', '.join(args_knobs)} "
                                   f"({self.framework or 'an unknown script'}): write a profile that binds it "
                                   "(`gpudoc profile new NAME --from-run`)")
            bind["args"] = self.framework
            bind["args_knobs"] = args_knobs
        if files:
            bind["files"] = files
        if overrides:
            bind["overrides"] = overrides
        if flags:
            bind["flags"] = flags
        return bind

    def _spelled(self, knob: str, key: str) -> Any:
        """A binding of ``knob`` to ``key``: the key alone, or with the map of the job's spellings."""
        spelled = self.spellings.get(knob)
        return {"key": key, "map": {format_value(k): v for k, v in spelled.items()}} if spelled else key


# The counts a reading checks, with the bounds a profile's [train] has (gpudoc.profiles.schema).
COUNT_BOUNDS: dict[str, tuple[int, int]] = {
    **{knob: (int(low), int(high)) for (table, knob), (low, high) in RANGES.items() if table == "train"},
    "zero_stage": (0, 3),
}


def is_count(knob: str, value: Any) -> bool:
    """A whole number (not a boolean) within the knob's bounds; a knob without bounds takes any
    number from 0."""
    low, high = COUNT_BOUNDS.get(knob, (0, 10**18))
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def read_job(command: Sequence[str], cwd: Path, environ: Mapping[str, str] | None = None) -> JobReading:
    """Read the job's knobs, world and bindings from its command line and the files it names (and
    ``environ``, the job's environment, where a front-end takes its world from it)."""
    from gpudoc.frameworks import registry

    job = parse_command(list(command))
    reading = registry.read(job, Path(cwd), environ)
    # A front-end that starts its own launcher (LitGPT's devices, LLaMA-Factory's NPROC_PER_NODE, axolotl's
    # --launcher torchrun) counts the workers; srun in front of it counts the launchers it starts.
    for key, value in world(job, environ).as_launch().items():
        reading.launch.setdefault(key, value)
    reading.command = tuple(command)
    return reading
