"""The frameworks gpudoc knows, in the order a job is offered to them: the one place a name is looked up.

A job is the first framework's that is sure of it (its program, what its script imports, its own
config layout or flags); failing that, the first that recognises its shape at all (a ``key=value``
token is Hydra's shape; ``accelerate launch --config_file`` says how it runs, not what). The order
settles the cases two could claim: a native DeepSpeed script's bare ``--deepspeed`` before the
Trainer's ``--deepspeed ds.json``, axolotl's and LLaMA-Factory's YAML before a YAML given to
``HfArgumentParser``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.frameworks import (
    accelerate,
    axolotl,
    deepspeed,
    hf_trainer,
    hydra,
    lightning,
    litgpt,
    llamafactory,
    megatron,
    nanogpt,
    nemo,
    torchtune,
    trl,
)
from gpudoc.frameworks.base import Framework, ObservedPlace, Recognition, Resolved
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading

if TYPE_CHECKING:
    from gpudoc.bind.args import ArgContext, PresetResult
    from gpudoc.bind.filepresets import FilePreset
    from gpudoc.edits.argv import ArgEdits


def _adapter(module: Framework) -> Framework:
    """Each module, checked against ``Framework`` one by one (a tuple of modules is not)."""
    return module


ADAPTERS: tuple[Framework, ...] = (
    _adapter(torchtune), _adapter(lightning), _adapter(litgpt), _adapter(trl), _adapter(deepspeed), _adapter(megatron),
    _adapter(axolotl), _adapter(llamafactory),
    _adapter(hf_trainer), _adapter(hydra), _adapter(nanogpt), _adapter(accelerate), _adapter(nemo))
_BY_NAME: dict[str, Framework] = {adapter.name: adapter for adapter in ADAPTERS}


def get(name: str | None) -> Framework | None:
    return _BY_NAME.get(name) if name else None


def resolved(name: str, settings: Mapping[str, Any]) -> Resolved:
    """What framework ``name`` resolved inside the job, read by its adapter from the settings the
    probe reported; nothing for a name no adapter has (the probe's file is the job's to write)."""
    adapter = get(name)
    return adapter.resolved(settings) if adapter is not None else Resolved()


def pick(job: JobCommand, cwd: Path) -> tuple[Framework, Recognition] | None:
    """The framework the job is, and why; None: no framework's."""
    shape: tuple[Framework, Recognition] | None = None
    for adapter in ADAPTERS:
        found = adapter.recognise(job, cwd)
        if found is not None and found.sure:
            return adapter, found
        if found is not None and shape is None:
            shape = adapter, found
    return shape


def read(job: JobCommand, cwd: Path, environ: Mapping[str, str] | None = None) -> JobReading:
    """The job's knobs, from the sources its framework reads (nothing when none is recognised), and
    with the job's ``environ``, the processes a front-end that starts torchrun itself starts."""
    reading = JobReading()
    picked = pick(job, cwd)
    if picked is not None:
        picked[0].read(job, cwd, reading)
        if environ is not None:
            picked[0].launches(job, environ, reading)
    return reading


def observed_place(name: str | None, parsers: Sequence[Mapping[str, Any]], knob: str, value: Any,
                   stale: str | None) -> tuple[Framework, ObservedPlace] | None:
    """Where the job reads ``knob`` (``Framework.observed_place``), asked of its framework's adapter;
    where the reading recognised no framework, of each in order, and the one that answers is the
    job's (the probe saw what the command line did not say: a configurator, a composed config)."""
    adapter = get(name)
    for asked in (adapter,) if adapter is not None else ADAPTERS:
        found = asked.observed_place(parsers, knob, value, stale)
        if found is not None:
            return asked, found
    return None


def named_configs(args: list[str]) -> list[tuple[str, str, bool]]:
    """The config files a script's arguments name for a framework to read, by any framework's flags
    (``Framework.named_configs``), each once."""
    return list(dict.fromkeys(named for adapter in ADAPTERS for named in adapter.named_configs(args)))


def launches(job: JobCommand, cwd: Path, environ: Mapping[str, str]) -> dict[str, int]:
    """What ``read`` puts in a reading's ``launch`` from the job's environment, without reading its knobs."""
    reading = JobReading()
    picked = pick(job, cwd)
    if picked is not None:
        picked[0].launches(job, environ, reading)
    return reading.launch


def write_args(name: str, ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult | None:
    """``knobs`` written into the arguments ``ed`` holds by the framework whose flags a profile's
    ``[bind] args = NAME`` names; None: no framework takes that name."""
    adapter = next((a for a in ADAPTERS if name in a.arg_names), None)
    return adapter.edit_args(ed, knobs, ctx) if adapter is not None else None


def file_preset(name: str) -> FilePreset:
    """The config-file preset a profile's ``[bind.files."F"] = NAME`` (or a reading) names; KeyError
    for a name no framework's preset has (``file_preset_names`` lists them)."""
    adapter = get(name)
    if adapter is None or adapter.file_preset is None:
        raise KeyError(name)
    return adapter.file_preset


def file_layout(data: Any, suffix: str) -> str | None:
    """The framework whose own config a file's parsed ``data`` (with its ``suffix``) is laid out as,
    for the checks on a file bound by explicit key paths; None: no framework's."""
    if not isinstance(data, Mapping):
        return None
    return next((a.name for a in ADAPTERS if a.file_preset is not None and a.file_preset.has_layout is not None
                 and a.file_preset.has_layout(data, suffix)), None)


def file_preset_names() -> list[str]:
    return sorted(a.name for a in ADAPTERS if a.file_preset is not None)


def arg_preset_names() -> list[str]:
    return sorted(n for a in ADAPTERS for n in a.arg_names)


def takes_own_flags(name: str | None) -> bool:
    """Whether a job read as ``name`` has its knobs' command-line places written by its own
    argument preset (Hydra's keys, and LLaMA-Factory's ``key=value`` after its YAML, are the job's)."""
    adapter = get(name)
    return adapter is not None and adapter.name in adapter.arg_names


def resumes(name: str | None) -> bool:
    """Whether gpudoc knows where the framework ``name`` writes checkpoints and how it resumes."""
    adapter = get(name)
    return adapter is not None and adapter.resume_switch("") != ()
