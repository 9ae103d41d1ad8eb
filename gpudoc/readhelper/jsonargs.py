"""jsonargparse's reading of a LightningCLI or LitGPT command, in the job's interpreter (loaded by
``main.py`` beside it; it imports installed frameworks only).

Both CLIs apply ``--config`` files and ``--section.key`` flags in command-line order, a later one
winning. Each layer (one file, one flag) is replayed here to say which set a key last, since
jsonargparse keeps no record of it.

LightningCLI: the Trainer's part is jsonargparse's parse against the installed Trainer's signature
(its types and its defaults by installed version). ``model``/``data``/``optimizer``/``lr_scheduler``
name the job's own classes (``class_path``), which are never imported: their ``init_args`` are
composed as jsonargparse composes a subclass (a new ``class_path`` drops the old ``init_args``;
``--data.batch_size`` is ``--data.init_args.batch_size``), and a key no layer sets is a default
in the job's code, which the answer leaves out.

LitGPT: the command's own ``setup()`` through jsonargparse, as ``litgpt`` builds its parser; the
gradient accumulation counted by LitGPT's own ``TrainArgs``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

SUBCOMMANDS = ("fit", "validate", "test", "predict")
_CLASSES = ("model", "data", "optimizer", "lr_scheduler")  # subclass specs: the job's own classes
_LITGPT = {"finetune": "litgpt.finetune.lora", "finetune_lora": "litgpt.finetune.lora",
           "finetune_full": "litgpt.finetune.full", "finetune_adapter": "litgpt.finetune.adapter",
           "finetune_adapter_v2": "litgpt.finetune.adapter_v2", "pretrain": "litgpt.pretrain"}


def options(args: list[str]) -> Iterator[tuple[str, str | None]]:
    """(name, value) of each token as jsonargparse reads them: ``--key=value`` and ``--key value``
    are one option (every option of these CLIs takes a value); a positional is (token, None)."""
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-"):
            yield tok, None
            continue
        name, eq, value = tok.partition("=")
        if not eq:
            value, i = (args[i], i + 1) if i < len(args) else ("", i)
        yield name, value


def _scalar(text: str) -> Any:
    import yaml  # type: ignore[import-untyped]

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data} if prefix else {}


def _put(data: dict, key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[last] = value


def _load(value: str, cwd: str) -> tuple[dict, str | None]:
    """A ``--config`` value: a file (relative to the job's directory) or, as jsonargparse takes it, YAML text."""
    import yaml

    path = os.path.join(cwd, value)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"{value}: not a mapping of settings")
        return data or {}, os.path.abspath(path)
    data = _scalar(value)
    if not isinstance(data, dict):
        raise ValueError(f"--config {value}: no such file")
    return data, None


def layers(args: list[str], cwd: str, nested: str | None) -> list[dict[str, Any]]:
    """Each ``--config`` file and ``--section.key`` flag in order: its kind, where it is, and the
    leaves it sets. A config before the subcommand ``nested`` holds its keys under that name."""
    out: list[dict[str, Any]] = []
    seen_sub = nested is None
    for name, value in options(args):
        if value is None:
            seen_sub = seen_sub or name == nested
        elif name in ("--config", "-c"):
            data, path = _load(value, cwd)
            prefix = "" if seen_sub else f"{nested}."
            if prefix:
                data = data.get(nested) or {}
            out.append({"kind": "file", "arg": value, "file": path, "prefix": prefix, "leaves": _leaves(data),
                        "data": data})
        elif name.startswith("--"):
            out.append({"kind": "flag", "flag": name, "leaves": {name[2:]: _scalar(value)}, "text": value})
    return out


def _subclass(key: str, composed: dict) -> str:
    """``data.batch_size`` is ``data.init_args.batch_size`` once ``data`` names a class."""
    section, _, rest = key.partition(".")
    spec = composed.get(section)
    if section in _CLASSES and isinstance(spec, dict) and "class_path" in spec and rest and \
            not rest.startswith(("init_args", "class_path", "dict_kwargs")):
        return f"{section}.init_args.{rest}"
    return key


def compose(found: list[dict[str, Any]]) -> tuple[dict, dict[str, list[int]], dict[str, str]]:
    """The layers applied in order; for each leaf the layers that set it (the last one wins), and
    the key as its last layer writes it (a file's own key, before the subcommand's name)."""
    composed: dict = {}
    setters: dict[str, list[int]] = {}
    written: dict[str, str] = {}
    for index, layer in enumerate(found):
        for key, value in layer["leaves"].items():
            as_written = layer.get("prefix", "") + key
            section = key.partition(".")[0]
            if key == section and section in _CLASSES and isinstance(value, str):
                key = f"{section}.class_path"  # --data pkg.Data
            if key.endswith(".class_path") and section in _CLASSES and \
                    (composed.get(section) or {}).get("class_path") not in (None, value):
                composed[section] = {}  # another class: the old one's init_args are not its own
                for leaf in [k for k in setters if k.startswith(f"{section}.")]:
                    del setters[leaf]
            key = _subclass(key, composed)
            _put(composed, key, value)
            setters.setdefault(key, []).append(index)
            written[key] = as_written
    return composed, setters, written


def _plain(value: Any) -> Any:
    if hasattr(value, "as_dict"):
        return _plain(value.as_dict())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _named_class(value: Any) -> bool:
    return (isinstance(value, dict) and "class_path" in value) or (
        isinstance(value, list) and any(_named_class(v) for v in value))


def lightning(req: Mapping[str, Any]) -> dict[str, Any]:
    from importlib.metadata import version

    import jsonargparse
    from jsonargparse import ArgumentParser

    try:
        dist, trainer_class = "lightning", importlib.import_module("lightning.pytorch").Trainer
    except ImportError:  # the older distribution's own name
        dist, trainer_class = "pytorch_lightning", importlib.import_module("pytorch_lightning").Trainer
    args = [str(a) for a in req.get("args") or ()]
    sub = next((name for name, value in options(args) if value is None and name in SUBCOMMANDS), None)
    found = layers(args, str(req["cwd"]), sub)
    composed, setters, written = compose(found)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(trainer_class, "trainer", fail_untyped=False)
    # A callback, logger or plugin given by class_path may be the job's own class: not imported, not checked.
    trainer = {k: v for k, v in (composed.get("trainer") or {}).items() if not _named_class(v)}
    parsed = parser.parse_object({"trainer": trainer})
    typed = _plain(parsed.trainer)
    composed["trainer"] = {**(composed.get("trainer") or {}), **typed}
    defaults = {f"trainer.{k}": v for k, v in _plain(parser.get_defaults().trainer).items()}
    return {"config": _plain(composed), "setters": setters, "written": written, "defaults": defaults, "subcommand": sub,
            "layers": [{k: v for k, v in layer.items() if k not in ("leaves", "data")} for layer in found],
            "read_files": [layer["file"] for layer in found if layer.get("file")],
            "versions": {dist: version(dist), "jsonargparse": jsonargparse.__version__}}


def litgpt(req: Mapping[str, Any]) -> dict[str, Any]:
    """``litgpt COMMAND ARGS``: the command's ``setup()`` parsed by jsonargparse as litgpt's CLI parses it."""
    from importlib.metadata import version

    import jsonargparse
    from jsonargparse import ActionConfigFile, ArgumentParser

    command = str(req["command"])
    if command not in _LITGPT:
        raise ValueError(f"litgpt {command} is not one of its training commands")
    setup = importlib.import_module(_LITGPT[command]).setup
    from litgpt.args import TrainArgs  # type: ignore[import-not-found]

    args = [str(a) for a in req.get("args") or ()]
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(setup, fail_untyped=False, as_positional=True)
    cwd = str(req["cwd"])
    here = os.getcwd()
    os.chdir(cwd)  # its --config paths are the job's, relative to where it runs
    try:
        parsed = parser.parse_args(args)
    finally:
        os.chdir(here)
    found = layers(args, cwd, None)
    _composed, setters, written = compose(found)
    config = _plain(parsed)
    config.pop("config", None)
    accumulation = None
    devices, nodes = config.get("devices"), config.get("num_nodes")
    if isinstance(devices, int) and isinstance(nodes, int):
        try:
            accumulation = TrainArgs(**config["train"]).gradient_accumulation_iters(devices, nodes)
        except (AssertionError, TypeError, ZeroDivisionError):
            accumulation = None  # LitGPT refuses these numbers at launch
    return {"config": config, "setters": setters, "written": written, "accumulation": accumulation,
            "defaults": _plain(parser.get_defaults()),
            "layers": [{k: v for k, v in layer.items() if k not in ("leaves", "data")} for layer in found],
            "read_files": [layer["file"] for layer in found if layer.get("file")],
            "versions": {"litgpt": version("litgpt"), "jsonargparse": jsonargparse.__version__}}
