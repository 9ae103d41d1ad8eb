"""HF's and TRL's argument dataclasses, asked in the job's interpreter (loaded by ``main.py`` by path).

``hf_trainer``: transformers' ``HfArgumentParser`` over ``TrainingArguments`` alone (the job's own
dataclasses, a script's ``ModelArguments``, are not importable: their flags stay unparsed), taking the
command's flags, or the JSON/YAML args file given first with the flags after it over its values.
``trl``: the ``trl <command>`` CLI's own parser (``trl.scripts.<command>.make_parser``, a ``TrlParser``
over the command's config class, ``ModelConfig`` ...) with its ``--config`` YAML under the flags.
``llama-factory``: ``llamafactory-cli train ARGS`` as its training entry reads them (``read_args``:
a YAML or JSON first with ``key=value`` merged over it by OmegaConf, else flags) and parses them
(``_parse_train_args``: its HfArgumentParser over its five argument dataclasses), without
``get_train_args``'s checks of the machine it runs on (a GPU, a launcher, the output directory).

Request: ``{"framework": "hf-trainer", "args", "config"?, "trl_classes"?}`` or
``{"framework": "trl", "command", "args"}`` or ``{"framework": "llama-factory", "args"}`` (its answer:
``fields`` of all five dataclasses, ``given`` field -> ``["file", key]`` / ``["argv", key]``). Answer: ``fields`` (the training arguments after ``__post_init__``: bf16 resolved, old aliases
mirrored), ``given`` (field -> ``["argv", flag]`` or ``["file", key]``: where the command set it; a
field not named is its class's default in the installed release), ``declared`` (every option string
the parser declares), ``class``, ``versions``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any


def _assume_the_jobs_gpu() -> None:
    """The helper runs with no GPU visible; TrainingArguments refuses bf16 without one. The job runs
    on its own GPU, which decides that at launch: parsing assumes it supports bf16."""
    from transformers import training_args

    if hasattr(training_args, "is_torch_bf16_gpu_available"):
        training_args.is_torch_bf16_gpu_available = lambda *a, **k: True


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(getattr(value, "value", value))  # an enum (IntervalStrategy.STEPS) as its value


def _given_on_argv(parser: Any, args: Sequence[str]) -> dict[str, list[str]]:
    """Each field the command's flags set -> [``argv``, the flag as written] (its last occurrence)."""
    out: dict[str, list[str]] = {}
    for action in parser._actions:
        for tok in args:
            flag = tok.split("=", 1)[0]
            if flag in action.option_strings:
                out[action.dest] = ["argv", flag]
    return out


def _answer(parser: Any, training: Any, given: dict[str, list[str]]) -> dict[str, Any]:
    import dataclasses
    from importlib.metadata import version

    versions = {"transformers": version("transformers")}
    try:
        versions["trl"] = version("trl")
    except Exception:
        pass
    fields = {f.name: _plain(getattr(training, f.name, None)) for f in dataclasses.fields(training)}
    declared = sorted({opt for action in parser._actions for opt in action.option_strings})
    return {"fields": fields, "given": {k: v for k, v in given.items() if k in fields}, "declared": declared,
            "class": type(training).__name__, "versions": versions}


def _training(found: Sequence[Any]) -> Any:
    from transformers import TrainingArguments

    return next(obj for obj in found if isinstance(obj, TrainingArguments))


def _arguments_class(trl_names: Sequence[str]) -> Any:
    """TrainingArguments, or the TRL config the script imports (SFTConfig ...: its subclass, with
    TRL's own defaults)."""
    from transformers import TrainingArguments

    if trl_names:
        import trl as trl_pkg

        for name in trl_names:
            cls = getattr(trl_pkg, str(name), None)
            if isinstance(cls, type) and issubclass(cls, TrainingArguments):
                return cls
    return TrainingArguments


def hf_trainer(req: Mapping[str, Any]) -> dict[str, Any]:
    from transformers import HfArgumentParser

    _assume_the_jobs_gpu()
    args = [str(a) for a in req.get("args") or ()]
    config = req.get("config")  # the args file given first, relative to the job's directory
    # No abbreviations: the job's own parser also holds its own flags, which a prefix must not match here.
    parser = HfArgumentParser(_arguments_class(req.get("trl_classes") or ()), allow_abbrev=False)
    given: dict[str, list[str]] = {}
    read_files = []
    if config:
        path = os.path.abspath(str(config))
        read_files.append(path)
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        else:
            import yaml  # type: ignore[import-untyped]

            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        if not isinstance(data, dict):
            raise ValueError(f"{config}: not a mapping of arguments")
        # The file's keys as the parser's defaults, as parse_json_file/parse_yaml_file take them
        # (keys of the job's own dataclasses left out), then the flags after it over them.
        for action in parser._actions:
            if action.dest in data:
                action.default = data[action.dest]
                action.required = False
                given[action.dest] = ["file", action.dest]
    if req.get("trl_classes") and "--config" in args:
        return _trl_parsed(_arguments_class(req["trl_classes"]), args)
    given.update(_given_on_argv(parser, args))
    found = parser.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
    answer = _answer(parser, _training(found[:-1]), given)
    answer["read_files"] = read_files
    return answer


def trl(req: Mapping[str, Any]) -> dict[str, Any]:
    import importlib

    command = str(req["command"])
    args = [str(a) for a in req.get("args") or ()]
    importlib.import_module("transformers")
    _assume_the_jobs_gpu()
    try:
        script = importlib.import_module(f"trl.scripts.{command}")
    except ModuleNotFoundError as exc:
        if exc.name != f"trl.scripts.{command}":
            raise
        raise ValueError(f"this TRL has no `trl {command}` command") from None
    return _trl_parsed(None, args, script.make_parser())


def _trl_parsed(cls: Any, args: list[str], parser: Any = None) -> dict[str, Any]:
    """TrlParser's ``--config`` YAML under the flags: the ``trl`` CLI's own parser, or one over the
    TRL config a script builds with ``TrlParser`` (its other dataclasses are the script's)."""
    if parser is None:
        from trl import TrlParser

        parser = TrlParser(cls, allow_abbrev=False)
    given = {}
    read_files = []
    if "--config" in args:
        path = args[args.index("--config") + 1]
        read_files.append(os.path.abspath(path))
        import yaml

        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
        if isinstance(data, dict):
            given = {action.dest: ["file", action.dest] for action in parser._actions if action.dest in data}
    given.update(_given_on_argv(parser, [a for a in args if a != "--config"]))
    found = parser.parse_args_and_config(args, return_remaining_strings=True)
    answer = _answer(parser, _training(found[:-1]), given)
    answer["read_files"] = read_files
    return answer


def llama_factory(req: Mapping[str, Any]) -> dict[str, Any]:
    import dataclasses
    import sys
    from importlib.metadata import version

    args = [str(a) for a in req.get("args") or ()]
    import llamafactory  # type: ignore[import-not-found]  # first: without it nothing else is imported

    _assume_the_jobs_gpu()
    from llamafactory.hparams import parser as lf_parser  # type: ignore[import-not-found]

    notes = []
    sys.argv = ["llamafactory-cli", *args]  # read_args reads the command line itself
    read = lf_parser.read_args()
    given: dict[str, list[str]] = {}
    read_files = []
    if isinstance(read, dict):
        from omegaconf import OmegaConf

        read_files.append(os.path.abspath(args[0]))
        overrides = OmegaConf.to_container(OmegaConf.from_cli(args[1:]))
        given = {str(k): ["file", str(k)] for k in read if not isinstance(overrides, dict) or k not in overrides}
        given.update({str(k): ["argv", str(k)] for k in (overrides if isinstance(overrides, dict) else ())})
        if read.get("deepspeed") and not _importable("deepspeed"):
            # TrainingArguments loads the JSON through DeepSpeed; its ZeRO settings are gpudoc's to read.
            notes.append(f"deepspeed is not installed for this interpreter: the job stops at its deepspeed "
                         f"{read['deepspeed']}; read without it")
            read = {k: v for k, v in read.items() if k != "deepspeed"}
    else:
        given = _flags_given(args)
    found = lf_parser._parse_train_args(read)
    fields: dict[str, Any] = {}
    for obj in found:
        fields.update({f.name: _plain(getattr(obj, f.name, None)) for f in dataclasses.fields(obj)})
    return {"fields": fields, "given": {k: v for k, v in given.items() if k in fields}, "notes": notes,
            "read_files": read_files, "versions": {"llamafactory": llamafactory.__version__,
                                                   "transformers": version("transformers")}}


def _flags_given(args: Sequence[str]) -> dict[str, list[str]]:
    """Each field a ``--field value`` / ``--field=value`` flag sets -> [``argv``, the flag]."""
    return {tok[2:].split("=", 1)[0]: ["argv", tok.split("=", 1)[0]] for tok in args if tok.startswith("--")}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
