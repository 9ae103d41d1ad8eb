"""LightningCLI's composition of the job's ``--config`` files and flags, asked of jsonargparse in the
job's interpreter (``gpudoc/readhelper/jsonargs.py``), with the installed Trainer's signature.

Asked where gpudoc's own reading could differ from it: a ``model``/``data`` that names a class
(``class_path``: a later layer merges into its ``init_args``, ``--data.batch_size`` is one of them,
another class drops them) or more than one ``--config``. A micro batch that no layer sets is then
a default in the job's own code: "unknown", never a guess. Asking imports the Trainer, so torch
(seconds, once: the answer is cached); a single plain config reads the same by hand.

Where a knob lives decides how a changed value is written: the command's flag; the one file that
sets it, edited in place; a key that several layers set (a file a later layer overrides), written
as a flag at the end, never in a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.configvalues import count
from gpudoc.frameworks import asked
from gpudoc.frameworks.lightning import SUBCOMMANDS, train_batch_keys
from gpudoc.job.argv import JobCommand
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import cli_options, knob_value, load_config

TIMEOUT_S = 60.0  # the Trainer's import is torch's: seconds, more on a busy machine
_CLASSES = ("model", "data", "optimizer", "lr_scheduler")


def needed(args: list[str], cwd: Path) -> bool:
    """Whether jsonargparse's composition can differ from reading each layer as written."""
    options = cli_options(args)
    configs = [value for _, name, value in options if name in ("--config", "-c")]
    if len(configs) > 1 or any(name[2:] in _CLASSES or ".init_args." in name or name.endswith(".class_path")
                               for _, name, _ in options):
        return True
    return any(_names_class(load_config(cwd / c, c, JobReading())) for c in configs if (cwd / c).is_file())


def _names_class(data: Any) -> bool:
    """A model/data section (at the top, or under a subcommand's name) that names its class."""
    if not isinstance(data, Mapping):
        return False
    return any(isinstance(data.get(c), Mapping) and "class_path" in data[c] for c in _CLASSES) or any(
        _names_class(data.get(sub)) for sub in SUBCOMMANDS)


def composed(job: JobCommand, cwd: Path, r: JobReading, keys: Mapping[str, tuple[str, ...]]) -> bool:
    """jsonargparse's composition read into ``r`` for ``keys`` (knob -> its keys, first found wins);
    False (with one note) when it could not be asked, and gpudoc's own reader reads instead."""
    args = job.script_args
    if not needed(args, cwd):
        return False
    configs = [cwd / value for _, name, value in cli_options(args) if name in ("--config", "-c")]
    python = target_python(job.argv, os.environ, str(cwd))
    try:
        if python is None:
            raise asked.Unanswered("the job's interpreter was not found")
        answer = asked.ask({"framework": "lightning", "args": args, "cwd": str(cwd.resolve())}, python=python,
                           cwd=cwd, files=[c for c in configs if c.is_file()], timeout_s=TIMEOUT_S)
    except asked.Unanswered as exc:
        why = str(exc)
        said = (f"jsonargparse refuses the command ({why.removeprefix('ArgumentError: ')}), and so will LightningCLI"
                if why.startswith("ArgumentError: ") else f"jsonargparse could not be asked ({why})")
        r.notes.append(f"lightning: {said}; read by gpudoc's own reader, which reads each --config and flag as "
                       "written (no class_path merging)")
        return False
    versions = answer.get("versions") or {}
    r.version = versions.get("lightning") or versions.get("pytorch_lightning") or r.version
    _place(answer, cwd, r, keys)
    return True


def _place(answer: dict[str, Any], cwd: Path, r: JobReading, keys: Mapping[str, tuple[str, ...]]) -> None:
    config = answer.get("config") or {}
    setters: dict[str, list[int]] = answer.get("setters") or {}
    written: dict[str, str] = answer.get("written") or {}
    layers: list[dict[str, Any]] = answer.get("layers") or []
    defaults: dict[str, Any] = answer.get("defaults") or {}
    by_flag: list[str] = []
    for knob, candidates in keys.items():
        if knob == "micro_batch_size":
            candidates = (*candidates, *train_batch_keys(config))
        key = next((k for c in candidates for k in (c, _init_args(c)) if k in setters), None)
        if key is None:
            default = next((c for c in candidates if c in defaults), None)
            if default is not None:  # the Trainer's own default, by installed version
                value = defaults[default] if defaults[default] is not None or knob != "precision" else "32-true"
                r.set(knob, knob_value(knob, value), "default", "lightning")
            elif knob == "micro_batch_size":
                r.notes.append(_unknown(config, candidates))
            continue
        value = knob_value(knob, _get(config, key))
        last = layers[setters[key][-1]]
        if last["kind"] == "flag":
            r.set(knob, value, "argv", str(last["flag"]))
        elif len(setters[key]) == 1 and last.get("file") and _within(Path(last["file"]), cwd):
            r.set(knob, value, "file", written.get(key, key), _relative(Path(last["file"]), cwd))
        else:
            r.set(knob, value, "argv", f"--{key}")
            files = [str(layers[i].get("arg")) for i in setters[key]]
            by_flag.append(f"{knob} ({key}, set by {' then '.join(files)})")
    _world(config, setters, r)
    if by_flag:
        r.notes.append("lightning: composed by jsonargparse; changed with a flag after the configs, not in a file "
                       "a later layer overrides: " + ", ".join(by_flag))


def _world(config: Mapping[str, Any], setters: Mapping[str, list[int]], r: JobReading) -> None:
    """The Trainer's own processes (``trainer.devices`` x ``trainer.num_nodes``) where a layer sets
    the devices as a count or a list; its default ``auto`` is every GPU found at launch."""
    trainer = config.get("trainer") or {}
    devices = trainer.get("devices")
    if "trainer.devices" not in setters:
        return
    devices = len(devices) if isinstance(devices, list) else count(devices)
    nodes = count(trainer.get("num_nodes", 1))
    if isinstance(devices, int) and devices >= 1 and isinstance(nodes, int) and nodes >= 1:
        r.launch.update({"nproc_per_node": devices, "nnodes": nodes})
    else:
        r.notes.append(f"lightning: trainer.devices = {trainer.get('devices')} is counted at launch: the world size "
                       "was not read")


def _unknown(config: Mapping[str, Any], candidates: tuple[str, ...]) -> str:
    section = candidates[0].split(".")[0]
    spec = config.get(section)
    named = spec.get("class_path") if isinstance(spec, Mapping) else None
    whose = f"{section} ({named})" if named else f"the job's {section} class"
    return (f"lightning: no --config or flag sets {section}.batch_size: it is a default in the job's own code of "
            f"{whose}, which gpudoc does not import; micro_batch_size is unknown (set --{section}.batch_size to bind it)")


def _init_args(key: str) -> str:
    section, _, rest = key.partition(".")
    return f"{section}.init_args.{rest}" if section in _CLASSES and not rest.startswith("init_args.") else key


def _get(config: Mapping[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _within(path: Path, cwd: Path) -> bool:
    try:
        path.resolve().relative_to(cwd.resolve())
    except ValueError:
        return False
    return True


def _relative(path: Path, cwd: Path) -> str:
    return str(path.resolve().relative_to(cwd.resolve()))
