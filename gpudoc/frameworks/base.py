"""What gpudoc knows of one training framework, behind one interface.

Each framework is a module of ``gpudoc.frameworks`` that implements ``Framework`` (pre-commit's
``lang_base.Language`` is the model: a module per language, a registry of modules). A module says
how to recognise a job that is its own (by what the script imports or the program it runs, never by
one flag every training script has), reads the job's sources in the order the framework applies
them, writes knobs back in its own override syntax and its own config file's layout, and knows the
lines it prints of its settings, its step limit, its resume switch and where its checkpoints are.
``gpudoc.frameworks.registry`` holds the modules in the order they are asked; it is the one place a
framework's name is looked up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from gpudoc.edits.argv import ArgEdits
from gpudoc.reported import count

if TYPE_CHECKING:
    from gpudoc.bind.args import ArgContext, PresetResult
    from gpudoc.bind.filepresets import FilePreset
    from gpudoc.job.argv import JobCommand
    from gpudoc.job.checkpoints import Checkpoint
    from gpudoc.job.knobs import JobReading


@dataclass(frozen=True)
class Recognition:
    """Why a job is a framework's. ``sure``: evidence of the framework itself (its program, what the
    script imports, its own config layout or flags); not sure: a shape other jobs share too (a
    ``key=value`` token), taken only when no framework is sure."""

    sure: bool
    why: str


@dataclass(frozen=True)
class Resolved:
    """What a framework resolved inside the job, read from the settings the probe reported of it
    (``gpudoc/probe/settings.py``: the HF Trainer's arguments after its own ``__post_init__``, the
    Lightning Trainer's, a DeepSpeed engine's config, a torchtune recipe's parsed config, a
    nanoGPT-style script's globals): each knob in the profile's spelling with the settings key it
    came from, and the optimizer steps the run takes where the framework worked them out."""

    knobs: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    total_steps: int | None = None


@dataclass(frozen=True)
class ObservedPlace:
    """Where a job is known to read a knob, found in what the probe saw of its parsers: ``key``, the
    flag or override key a rung writes, in the framework's own syntax, and ``said``, what it is."""

    key: str
    said: str


@dataclass(frozen=True)
class TrialSwitches:
    """The switches a framework's own parser declares that keep a short trial (``gpudoc tune``) to
    itself: ``output``, its output directory's; ``off``, each that turns saving or a tracker off,
    with the value that does; ``off_if_declared``, the same for switches some releases or scripts
    have and others refuse (given only where the command already gives them or the script declares
    them)."""

    output: str
    off: tuple[tuple[str, str], ...] = ()
    off_if_declared: tuple[tuple[str, str], ...] = ()


@runtime_checkable
class Framework(Protocol):
    """One framework's knowledge. A member a framework has no use for answers "none": ``()``,
    ``None`` or ``[]``, never a guess."""

    # The one spelling of the framework in a reading, a run record and a profile's ``[bind] args``.
    name: str
    # The ``[bind] args`` names whose flags ``edit_args`` writes (a profile may name the launcher or
    # the library instead of the framework: "accelerate", "transformers"); () when it takes no flags
    # of its own gpudoc writes (its knobs live in files or in the job's own ``key=value`` keys).
    arg_names: tuple[str, ...]
    # Where each knob lives in its own config file, read and written by the same preset (a profile's
    # ``[bind.files."F"] = NAME``); None: it has no config layout of its own.
    file_preset: FilePreset | None
    # The lines it prints of its settings, as (knob, regular expression whose first group is the
    # value): what proves a changed knob reached the job (``gpudoc.diagnose.echo``).
    echo: tuple[tuple[str, str], ...]
    # The switches that keep a trial run to itself; None: none gpudoc knows (the probe stops the
    # trial, and only switches the script declares are given).
    trial_switches: TrialSwitches | None

    def recognise(self, job: JobCommand, cwd: Path) -> Recognition | None:
        """Whether the job is this framework's, and why; None when nothing says so."""
        ...

    def read(self, job: JobCommand, cwd: Path, r: JobReading) -> None:
        """Its sources, in the order the framework applies them (a later one wins), into ``r``."""
        ...

    def defaults(self, version: str | None) -> Mapping[str, Any]:
        """The knobs' values when no source sets them, for the installed ``version`` (None: unknown,
        and a default that changed between releases is left out: TRL's checkpointing and bf16)."""
        ...

    def edit_args(self, ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult | None:
        """Write ``knobs`` in its override syntax into the script's arguments; None: it has none."""
        ...

    def named_configs(self, args: list[str]) -> list[tuple[str, str, bool]]:
        """The config files the script's arguments name for a framework to read: (the file, that
        framework's file preset, whether this framework fills the file's "auto" values from its own
        flags, so they stay "auto"); [] when they name none."""
        ...

    def step_limit(self, args: list[str], steps: int) -> list[str] | None:
        """The script's arguments with the framework's own switch that stops training after
        ``steps`` optimizer steps set (one already there replaced); None: it has no such switch."""
        ...

    def resume_switch(self, path: str) -> tuple[str, ...]:
        """The tokens that resume from the checkpoint at ``path``; () when it cannot resume."""
        ...

    def checkpoints(self, args: list[str], cwd: Path, since: float | None) -> list[Checkpoint]:
        """The complete checkpoints the job's arguments say it writes, newest first."""
        ...

    def launches(self, job: JobCommand, environ: Mapping[str, str], r: JobReading) -> None:
        """For a front-end that starts torchrun itself from what its environment says (LLaMA-Factory's
        ``FORCE_TORCHRUN``, ``NNODES``, ``NPROC_PER_NODE``, the visible GPUs): the processes per node
        and nodes it starts, into ``r.launch``, with a note saying where each came from; nothing
        when it starts none itself (a launcher in front of it says instead)."""
        ...

    def resolved(self, settings: Mapping[str, Any]) -> Resolved:
        """What it resolved inside the job, from the settings the probe reported (untrusted: each
        value checked before it is believed); empty where the probe reports nothing of it."""
        ...

    def knob_values(self, knob: str, version: str | None) -> Mapping[str, Any] | None:
        """The values ``knob`` takes in the framework's release ``version`` (None: unknown), each under
        the profile's spelling of it: what a writer puts in the job's own flag or key (precision
        ``bf16`` is Lightning 2's ``bf16-mixed``, 1.x's ``bf16``, nanoGPT's ``bfloat16``); a value the
        release lacks is absent. None: no spelling of its own (the profile's value is written as it
        is, or the knob is not the framework's to write)."""
        ...

    def observed_place(self, parsers: Sequence[Mapping[str, Any]], knob: str, value: Any,
                       stale: str | None) -> ObservedPlace | None:
        """Where the job reads ``knob``, which held ``value`` in the run the probe watched, found in
        the parsers the probe saw (``parsers``): for a knob the reading found no place for
        (``stale`` None), or found only under the key ``stale`` of a file that did not give the job
        its value. None: no place this framework's syntax reaches."""
        ...


# The "none" answers, for a framework module to take as its own member (``checkpoints = no_checkpoints``).
def no_defaults(version: str | None) -> Mapping[str, Any]:
    return {}


def no_edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult | None:
    return None


def no_named_configs(args: list[str]) -> list[tuple[str, str, bool]]:
    return []


def no_step_limit(args: list[str], steps: int) -> list[str] | None:
    return None


def no_resume_switch(path: str) -> tuple[str, ...]:
    return ()


def flag_step_limit(flag: str, *, eq_only: bool = False) -> Callable[[list[str], int], list[str]]:
    """A ``step_limit`` that sets ``flag`` to the steps: ``--flag N``, or ``--flag=N`` for a
    parser that takes only that (``eq_only``)."""
    def step_limit(args: list[str], steps: int) -> list[str]:
        ed = ArgEdits(list(args))
        ed.set_value((flag,), str(steps), eq_only=eq_only, append_form="eq" if eq_only else "sep")
        return ed.result()
    return step_limit


def mixed_precision_flags(ed: ArgEdits, res: PresetResult, precision: Any, framework: str, *,
                          explicit: bool = False) -> None:
    """A mixed ``precision`` as the pair of switches ``--bf16``/``--fp16`` (both off for fp32); any
    other precision has no flag. ``explicit``: both written out, for a parser whose default is on."""
    if precision in ("bf16", "fp16", "fp32"):
        ed.set_bool(("--fp16",), precision == "fp16", explicit=explicit)
        ed.set_bool(("--bf16",), precision == "bf16", explicit=explicit)
        res.expressed.add("precision")
    elif precision is not None:
        res.cannot["precision"] = f"{framework}: --bf16/--fp16 are mixed precision; '{precision}' has no flag"


def override_step_limit(key: str) -> Callable[[list[str], int], list[str]]:
    """A ``step_limit`` that sets the ``key=N`` override."""
    def step_limit(args: list[str], steps: int) -> list[str]:
        ed = ArgEdits(list(args))
        ed.set_kv(key, str(steps))
        return ed.result()
    return step_limit


def global_batch(micro: Any, accumulation: Any, world: int) -> int:
    """The samples per optimizer step over all ranks, for a framework that takes the global batch
    and derives its accumulation (LitGPT, NeMo): micro x accumulation x data-parallel ranks."""
    return int(micro) * int(accumulation) * max(1, world)


def no_checkpoints(args: list[str], cwd: Path, since: float | None) -> list[Checkpoint]:
    return []


def no_launches(job: JobCommand, environ: Mapping[str, str], r: JobReading) -> None:
    return None


def no_resolved(settings: Mapping[str, Any]) -> Resolved:
    return Resolved()


def no_knob_values(knob: str, version: str | None) -> Mapping[str, Any] | None:
    return None


def no_observed_place(parsers: Sequence[Mapping[str, Any]], knob: str, value: Any,
                      stale: str | None) -> ObservedPlace | None:
    return None


def counted(settings: Mapping[str, Any], keys: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """{knob: (value, key)} for each ``knob: key`` whose setting is a positive whole number."""
    return {knob: (settings[key], key) for knob, key in keys.items() if count(settings.get(key))}


def first_count(settings: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` whose setting is a positive whole number."""
    return next((settings[key] for key in keys if count(settings.get(key))), None)
