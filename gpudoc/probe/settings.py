"""What the job was told to train with, for the probe (``agent.py`` loads this file by path beside
itself, in the job's interpreter; gpudoc never imports it): the parsers it used (the flags each
declares and what it parsed), the config files it read, the settings its frameworks resolved.

No wrapper around any framework: a parser is noticed when argparse makes its namespace; settings are read from the frames of the job's own training
loop, at its first optimizer step or at the OOM that ends it (the traceback's frames), where the
framework's objects are the ``self`` or the locals of a frame — the Lightning ``Trainer``, a
DeepSpeed engine, the config Hydra composed or torchtune parsed (an OmegaConf ``DictConfig``), with
Hydra's group choices and overrides from its own ``HydraConfig``. Config files are noticed through
Python's ``open`` audit event (no frame is added anywhere) and read again, by the probe, once the
process trains.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_PARSERS = 8
MAX_OPTIONS = 2000
# Where argparse makes the namespace, by Python version (3.13 moved it into _parse_known_args2).
_PARSE_FRAMES = ("parse_known_args", "_parse_known_args2", "parse_known_intermixed_args",
                 "_parse_defaults_and_environ")  # jsonargparse's parse_args (LightningCLI, LitGPT) starts there
MAX_KEYS = 400
MAX_FILES = 16
MAX_FILE_BYTES = 2**20
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
CONFIGURATOR = "configurator.py"
_LIGHTNING = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
_LIGHTNING_SETTINGS = ("accumulate_grad_batches", "precision", "world_size", "num_devices", "num_nodes",
                       "max_steps", "max_epochs", "gradient_clip_val")
_DEEPSPEED = "deepspeed.runtime.engine"
# Frames of torch an OOM passes through, and the phase each is.
_PHASE_FRAMES = (("backward", "backward"), ("_engine_run_backward", "backward"), ("step", "optimizer"))
_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's frame, whose f_locals is a snapshot (not imported: start-up cost)


class AfterImport:
    """Calls ``then(module)`` once the job's own import of ``name`` has executed (not when it is
    looked up: transformers asks for torch's spec long before it imports it). The module keeps its
    own loader; only that loader's ``exec_module`` is followed by the call."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            run(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, then: Any) -> None:
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, AfterImport(name, then))


def observe_parsers(argparse: Any, probe: Any) -> None:
    """Every ``parse_known_args`` (``parse_args`` goes through it; HfArgumentParser is an
    ArgumentParser) starts with ``Namespace()`` when the job passes none: the new namespace and the
    parser in the calling frame are noted there, before any option is read, so no error the parse
    raises passes through the probe. Kept in ``probe.parsers`` until the process trains."""
    import weakref

    original = argparse.Namespace.__init__

    def init(namespace: Any, **kwargs: Any) -> None:
        original(namespace, **kwargs)
        try:
            if os.getpid() != probe.pid or len(probe.parsers) >= MAX_PARSERS or kwargs:
                return
            caller: Any = sys._getframe(1)
            if caller.f_code.co_name == "__init__" and isinstance(caller.f_locals.get("self"), argparse.Namespace):
                caller = caller.f_back  # a Namespace subclass's own __init__ (jsonargparse's) called this one
            parser = caller.f_locals.get("self") if caller is not None and caller.f_code.co_name in _PARSE_FRAMES else None
            if isinstance(parser, argparse.ArgumentParser):
                # What it declares is read now (a parser is often gone once it has parsed); the
                # values once this process trains, when they are all in the namespace. A parser
                # that parses again keeps its last namespace.
                found = declared(parser)
                probe.parsers[:] = [p for p in probe.parsers if p[0] != found]
                probe.parsers.append((found, weakref.ref(namespace)))
        except Exception:
            pass

    argparse.Namespace.__init__ = init


def declared(parser: Any) -> dict:
    """The flags a parser declares, its subcommands' included: the exact set the job accepts."""
    found: set[str] = set()
    parsers = [parser]
    while parsers and len(found) < MAX_OPTIONS:
        for action in parsers.pop()._actions:
            found.update(action.option_strings)
            choices = getattr(action, "choices", None)  # a subcommand's parsers, by name
            parsers += [c for c in choices.values() if hasattr(c, "_actions")] if isinstance(choices, dict) else []
    options = sorted(found)[:MAX_OPTIONS]
    return {"prog": str(parser.prog)[:200], "type": type(parser).__name__, "options": options}


def parsed_values(namespace: Any) -> dict:
    """What a parse produced, scalars only (a path, a count, a rate, a switch)."""
    values: dict = {}
    for key, value in (vars(namespace).items() if namespace is not None else ()):
        if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 500):
            values[key] = value
    return values


def frames_from(frame: Any) -> list:
    """The frame and every caller, innermost first."""
    out: list = []
    while frame is not None and len(out) < 400:
        out.append(frame)
        frame = frame.f_back
    return out


def frame_locals(frame: Any) -> dict:
    """A frame's variables, read without keeping them alive. Before Python 3.13, reading ``f_locals``
    of a running function leaves a snapshot dict on the frame, holding every variable it had then
    (the training loop's batch and loss) until the function reads it again or returns: the job's
    memory would hold one batch more than it does without the probe. So the snapshot is emptied
    again, unless the job holds it itself (its own ``locals()``); a module's or class body's
    variables are the namespace itself, never a snapshot."""
    local = frame.f_locals
    if sys.version_info >= (3, 13) or not frame.f_code.co_flags & _OPTIMIZED:
        return local
    copy = dict(local)
    if sys.getrefcount(local) <= 3:  # the frame's, this function's, getrefcount's own argument
        local.clear()
    return copy


def innermost(tb: Any) -> Any:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None else None


def phase_of(tb: Any) -> str | None:
    """The phase from the frames the OOM passed through: the innermost named one wins (the hooks'
    state can lag, e.g. an OOM in backward's first kernel before any gradient reached the output)."""
    phase = None
    while tb is not None:
        code = tb.tb_frame.f_code
        for name, what in _PHASE_FRAMES:
            if code.co_name == name and ("autograd" in code.co_filename or "_tensor" in code.co_filename
                                         or ("optim" in code.co_filename and what == "optimizer")):
                phase = what
        tb = tb.tb_next
    return phase


def resolved_settings(frames: list) -> list[dict]:
    """``framework`` events for what the frames hold, outermost framework object first."""
    found: dict[str, dict] = {}
    configs: list[Any] = []
    for frame in reversed(frames):
        local = frame_locals(frame)
        me = local.get("self")
        trainer = me if _is(me, _LIGHTNING, "Trainer") else getattr(me, "trainer", None)
        if "lightning" not in found and _is(trainer, _LIGHTNING, "Trainer"):
            found["lightning"] = _lightning(trainer)
        if "deepspeed" not in found and _is(me, (_DEEPSPEED,), "DeepSpeedEngine"):
            found["deepspeed"] = _deepspeed(me)
        for value in local.values():
            if _is_dict_config(value) and all(value is not c for c in configs):
                configs.append(value)
    events = [{"name": name, "settings": settings} for name, settings in found.items()]
    config = next((c for c in configs if "hydra" not in c), None)
    hydra = _hydra()
    if config is not None:  # the config torchtune parsed, when its recipe runs without Hydra
        name = "torchtune" if hydra is None and "torchtune.config" in sys.modules else "omegaconf"
        events.append({"name": name, "settings": flatten(_container(config))})
    if hydra is not None:
        events.append({"name": "hydra", "settings": hydra})
    return events


def _is(obj: Any, modules: tuple, name: str) -> bool:
    """``obj`` is an instance of the framework's class (or a subclass), named without importing it."""
    return obj is not None and any(k.__module__ in modules and k.__name__ == name for k in type(obj).__mro__)


def _lightning(trainer: Any) -> dict:
    settings: dict = {}
    for key in _LIGHTNING_SETTINGS:
        try:
            settings[key] = _scalar(getattr(trainer, key))
        except Exception:  # noqa: S112 - a property this Lightning version lacks or cannot answer yet
            continue
    settings["strategy"] = type(getattr(trainer, "strategy", None)).__name__
    # The optimizer steps the fit will run (epochs x batches / accumulation, or max_steps): asked only
    # once the training data is loaded, when answering loads nothing and prints nothing.
    if getattr(trainer, "train_dataloader", None) is not None:
        try:
            settings["estimated_stepping_batches"] = _scalar(trainer.estimated_stepping_batches)
        except Exception:  # a version that cannot say: the total stays unknown
            pass
    return settings


def _deepspeed(engine: Any) -> dict:
    settings: dict = {}
    for key, how in (("train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu"),
                     ("gradient_accumulation_steps", "gradient_accumulation_steps"),
                     ("train_batch_size", "train_batch_size"), ("zero_stage", "zero_optimization_stage")):
        try:
            settings[key] = _scalar(getattr(engine, how)())
        except Exception:  # noqa: S112 - a method this DeepSpeed version lacks
            continue
    return settings


def _is_dict_config(value: Any) -> bool:
    omegaconf = sys.modules.get("omegaconf")
    return omegaconf is not None and isinstance(value, omegaconf.DictConfig)


def _container(config: Any) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(config, resolve=True)
    except Exception:  # an interpolation that does not resolve: the values as written
        return OmegaConf.to_container(config, resolve=False)


def _hydra() -> dict | None:
    if "hydra.core.hydra_config" not in sys.modules:
        return None
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    config = HydraConfig.get()
    return {"choices": {str(k): _scalar(v) for k, v in dict(config.runtime.choices).items()},
            "overrides": [str(o) for o in list(config.overrides.task)][:MAX_KEYS]}


def flatten(value: Any, prefix: str = "", out: dict | None = None) -> dict:
    """Dotted keys to scalars (lists by index), at most ``MAX_KEYS``."""
    out = {} if out is None else out
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if len(out) >= MAX_KEYS:
            break
        name = f"{prefix}{key}"
        if isinstance(item, (dict, list)):
            flatten(item, name + ".", out)
        else:
            out[name] = _scalar(item)
    return out


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)[:500]


class ConfigFiles:
    """The config files the job opens for reading, noticed through the ``open`` audit event until the
    process trains (audit hooks cannot be removed: after that the hook returns at its first test)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.done = False
        self.configurator = False  # the job read a nanoGPT-style configurator.py (to exec it)
        self.library = tuple(os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})

    def hook(self, event: str, args: tuple) -> None:
        if event != "open" or self.done:
            return
        try:
            path, mode = args[0], args[1]
            if isinstance(path, str) and os.path.basename(path) == CONFIGURATOR:
                self.configurator = True
            if not isinstance(path, str) or not path.endswith(CONFIG_SUFFIXES) or (mode and "r" not in mode):
                return
            path = os.path.realpath(path)
            if path not in self.paths and len(self.paths) < MAX_FILES and not path.startswith(self.library):
                self.paths.append(path)
        except Exception:
            self.done = True

    def read(self) -> list[dict]:
        """What each file held (its scalars, flattened), read again now; stops the noticing."""
        self.done = True
        out = []
        for path in self.paths:
            try:
                with open(path, "rb") as handle:
                    data = handle.read(MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    continue
                out.append({"path": path, "values": flatten(_parse(path, data.decode("utf-8")))})
            except Exception:  # noqa: S112 - not a config after all, or no parser for it here: nothing said
                continue
        return out


def configurator(files: ConfigFiles) -> dict | None:
    """A nanoGPT-style configurator's parser: the script exec()s ``configurator.py``, which takes
    ``--key=value`` for each of the script's own globals (``config_keys``, when the script lists them
    as nanoGPT's does; else its public scalar globals) and overrides them. Declared: those keys;
    values: the globals after the override, read once the process trains."""
    main = sys.modules.get("__main__")
    if not files.configurator or main is None:
        return None
    found = vars(main)
    keys = found.get("config_keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        keys = [k for k in found if not k.startswith("_")]
    values = {k: found[k] for k in keys[:MAX_OPTIONS] if k in found and (
        isinstance(found[k], (bool, int, float)) or (isinstance(found[k], str) and len(found[k]) <= 500))}
    return {"prog": CONFIGURATOR, "type": "configurator", "options": sorted(f"--{k}" for k in values), "values": values}


def _parse(path: str, text: str) -> Any:
    if path.endswith(".json"):
        import json

        return json.loads(text)
    if path.endswith(".toml"):
        import tomllib

        return tomllib.loads(text)
    yaml = sys.modules.get("yaml")  # only when the job itself reads YAML with PyYAML
    if yaml is None:
        raise ValueError("no YAML parser in this job")
    return yaml.safe_load(text)
