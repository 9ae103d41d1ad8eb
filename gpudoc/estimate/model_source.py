"""Where a model's ``config.json`` is: a file, its directory, or a model id in the local Hugging Face
cache; and which model a job names on its command line or in its config files.

Never the network: a model id is looked up only in the cache a download already filled
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``, as huggingface_hub
lays it out: ``models--ORG--NAME/snapshots/<commit>/config.json``, with ``refs/main`` naming the
commit). huggingface_hub itself is not imported: it would be one more dependency, and its lookup
functions fall back to the network.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudoc.errors import ProfileError

# How a model is named where a job says which one it trains, most specific first. Command-line
# names are compared without dashes (``--model-name-or-path`` is ``model_name_or_path``); dotted
# names are LightningCLI's ``--model.init_args.x`` and Hydra's / torchtune's ``key=value``.
_ARG_KEYS = (
    "model_name_or_path", "pretrained_model_name_or_path", "base_model", "model_name", "model_id", "model",
    "model.name_or_path", "model.pretrained_model_name_or_path", "model.model_name_or_path",
    "model.init_args.model_name_or_path", "model.init_args.pretrained_model_name_or_path",
    "model.init_args.model_name", "checkpointer.checkpoint_dir", "checkpoint_dir", "init_from",
)
_CONFIG_KEYS = (
    "model_name_or_path", "base_model", "pretrained_model_name_or_path", "model_name", "model_id",
    "model.name_or_path", "model.pretrained_model_name_or_path", "model.model_name_or_path",
    "model.init_args.model_name_or_path", "model.init_args.pretrained_model_name_or_path",
    "model.model_name", "checkpointer.checkpoint_dir", "checkpoint_dir", "init_from",
)
# nanoGPT's ``init_from`` and friends also take words that are not models.
_NOT_A_MODEL = frozenset({"", "scratch", "resume", "none", "null", "true", "false"})
_CONFIG_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class NamedModel:
    """A model a job names, and where: ``argv:--model_name_or_path`` or ``file:train.yaml:base_model``."""

    name: str
    where: str


def _usable(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.lower() in _NOT_A_MODEL or "${" in text:  # a Hydra interpolation names no model itself
        return None
    return text


def _dig(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


def _arg_values(script_args: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``--key value``, ``--key=value`` and ``key=value`` (Hydra, torchtune; ``+``/``++`` too) of a
    script's arguments, keyed without dashes, with how each was spelled; the last occurrence wins,
    as argparse and Hydra do."""
    values: dict[str, tuple[str, str]] = {}
    args = list(script_args)
    for i, tok in enumerate(args):
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    continue
                value = args[i + 1]
            values[name.replace("-", "_")] = (value, f"argv:--{name}")
        elif "=" in tok and not tok.startswith("-"):
            name, _, value = tok.lstrip("+").partition("=")
            values[name.replace("-", "_")] = (value, f"argv:{name}")
    return values


def model_name_from_job(script_args: Sequence[str],
                        config_data: Mapping[str, Any] | Sequence[tuple[str, Any]] = ()) -> NamedModel | None:
    """The model a job names, or None: what its own arguments say first (an override beats the
    file it overrides), then its config files.

    ``script_args`` are the script's arguments only (``JobCommand.script_args``: the launcher's own
    options are not the job's). ``config_data`` is the parsed content of the config files the job
    reads (YAML/JSON: axolotl, LLaMA-Factory, Hydra, torchtune, LightningCLI, a nanoGPT config as a
    dict), either one mapping or ``(file name, data)`` pairs, earlier files first, later ones winning.
    Looked at: ``--model_name_or_path`` and its kin (``--model_name``, ``--model``, ``--base_model``,
    ``--pretrained_model_name_or_path``), ``model.name_or_path=`` and the other dotted spellings,
    ``--model.init_args.model_name_or_path``, ``checkpoint_dir=`` / ``checkpointer.checkpoint_dir``
    (torchtune), ``init_from`` (nanoGPT, ``scratch``/``resume`` name no model). Hydra's bare
    ``model=NAME`` picks a config group, not a model, and is not read. Pure: reads no file.
    """
    args = _arg_values(script_args)
    for key in _ARG_KEYS:
        value, where = args.get(key, (None, ""))
        name = _usable(value)
        if key == "model" and not where.startswith("argv:--"):
            continue  # Hydra's `model=llama3` picks a config group, not a model
        if name:
            return NamedModel(name, where)
    files = [("config", config_data)] if isinstance(config_data, Mapping) else list(config_data)
    for key in _CONFIG_KEYS:
        for file_name, data in reversed(files):
            name = _usable(_dig(data, key))
            if name:
                return NamedModel(name, f"file:{file_name}:{key}")
    return None


def job_config_data(script_args: Sequence[str], cwd: Path) -> list[tuple[str, Any]]:
    """The YAML/JSON files a job's arguments name that exist (relative to ``cwd``), parsed; a file that
    does not parse is skipped. Not a reader of the job's knobs: only enough for ``model_name_from_job``."""
    found: list[tuple[str, Any]] = []
    for tok in script_args:
        text = tok.partition("=")[2] if tok.startswith("-") and "=" in tok else tok
        if not text.endswith(_CONFIG_SUFFIXES):
            continue
        path = Path(text).expanduser()
        data = _load(path if path.is_absolute() else cwd / path)
        if isinstance(data, Mapping):
            found.append((text, data))
    return found


def _load(path: Path) -> Any:
    """A YAML/JSON file's data; None when it cannot be read or parsed (the job would say so itself)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from gpudoc.job.sources import MAX_CONFIG_BYTES

    try:
        # Only a regular file: opening a FIFO (or a device) named like a config waits for a writer forever.
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None  # no real config is that large; parsing one would take minutes
        raw = path.read_text(encoding="utf-8")
        return json.loads(raw) if path.suffix == ".json" else YAML(typ="safe", pure=True).load(raw)
    except (OSError, ValueError, YAMLError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


# --- the local Hugging Face cache ---------------------------------------------------------------

def hf_hub_cache(environ: Mapping[str, str] | None = None) -> Path:
    """Where huggingface_hub keeps downloaded repositories, by its own rules (HF_HUB_CACHE, the old
    HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub)."""
    env = os.environ if environ is None else environ
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return Path(env[var]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path("~/.cache").expanduser()
    return cache / "huggingface" / "hub"


def _looks_like_id(name: str) -> bool:
    """``ORG/NAME`` or ``NAME``: what the Hub accepts as a repository id (no path syntax)."""
    parts = name.split("/")
    return 1 <= len(parts) <= 2 and all(p and p not in (".", "..") and not p.startswith("~") for p in parts) \
        and not name.endswith(".json")


def _snapshot_config(repo: Path) -> Path | None:
    """The ``config.json`` of the snapshot ``refs/main`` names, else of the newest snapshot."""
    snapshots = repo / "snapshots"
    try:
        main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        main = ""
    if main and (snapshots / main / "config.json").is_file():
        return snapshots / main / "config.json"
    try:
        candidates = [d / "config.json" for d in snapshots.iterdir() if (d / "config.json").is_file()]
    except OSError:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def cached_config(model_id: str, hub: Path) -> Path | None:
    """``config.json`` of ``ORG/NAME`` in the cache at ``hub``; a bare ``NAME`` is ``models--NAME``
    (the Hub's old unprefixed ids, e.g. ``gpt2``), else the one ``models--*--NAME`` there is."""
    if not _looks_like_id(model_id):
        return None
    repos = [hub / ("models--" + model_id.replace("/", "--"))]
    if "/" not in model_id and hub.is_dir():
        owned = sorted(hub.glob(f"models--*--{glob.escape(model_id)}"))
        if len(owned) == 1:  # two organisations' NAME: not guessed
            repos += owned
    for repo in repos:
        if repo.is_dir():
            found = _snapshot_config(repo)
            if found is not None:
                return found
    return None


def find_model_config(name: str, *, bases: Sequence[Path] = (), environ: Mapping[str, str] | None = None,
                      key: str = "[model] hf_config", file: str | None = None) -> Path:
    """The ``config.json`` that ``name`` means: a file, a directory holding ``config.json`` (a
    checkpoint, a torchtune ``checkpoint_dir``), relative to each of ``bases`` in turn, or a model id
    in the local Hugging Face cache. A local path wins over a cache id of the same spelling.

    Raises ``ProfileError`` with one line saying what was looked for, where, and how to fix it.
    """
    path = Path(name).expanduser()
    candidates = [path] if path.is_absolute() else [base / path for base in bases]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
        if candidate.is_dir():
            if (candidate / "config.json").is_file():
                return candidate / "config.json"
            raise ProfileError(f"{key} = \"{name}\": {candidate} is a directory without a config.json",
                               file=file, key="model.hf_config")
    hub = hf_hub_cache(environ)
    found = cached_config(name, hub)
    if found is not None:
        return found
    looked = "no such file" + (f" beside {bases[0]}" if bases else "")
    if _looks_like_id(name):
        looked += f", and no model \"{name}\" in the Hugging Face cache {hub}"
        fix = (f"download it (huggingface-cli download {name} config.json), point HF_HOME at the cache "
               "that has it, or set [model] hf_config = \"path/to/config.json\"")
    else:
        fix = "set [model] hf_config = \"path/to/config.json\" (a file, its directory, or ORG/NAME in the cache)"
    raise ProfileError(f"{key} = \"{name}\": {looked}: {fix}", file=file, key="model.hf_config")


def read_config_json(path: Path, name: str) -> dict:
    """A ``config.json`` as a dict; a file that is not one is one ``ProfileError`` line."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProfileError(f"[model] hf_config = \"{name}\": cannot read {path}: {exc}",
                           file=str(path), key="model.hf_config") from None
    if not isinstance(config, dict):
        raise ProfileError(f"[model] hf_config = \"{name}\": {path} holds a JSON {type(config).__name__}, "
                           "not the object of a model's config.json", file=str(path), key="model.hf_config")
    return config


# --- the job's model, for a profile without one ---------------------------------------------------

_SHAPE_KEYS = ("hidden", "layers", "heads", "vocab")


def needs_model(model: Mapping[str, Any]) -> bool:
    """A ``[model]`` table that neither names a config.json nor gives the shape itself."""
    return not model.get("hf_config") and not all(model.get(k) for k in _SHAPE_KEYS)


def with_job_model(profile: Any, argv: Sequence[str], cwd: Path, environ: Mapping[str, str] | None = None,
                   config_data: Sequence[tuple[str, Any]] | None = None) -> tuple[Any, str | None]:
    """The profile with ``[model] hf_config`` set to the config.json of the model the job's command
    (``argv``, run in ``cwd``) names, and a note saying so; the profile unchanged (note None) when
    its ``[model]`` is complete or the job names no model. The profile's own ``[model]`` keys still
    win over the config.json. A named model that is nowhere local is a ``ProfileError``."""
    from dataclasses import replace

    from gpudoc.job.argv import parse_command

    if not argv or not needs_model(profile.model):
        return profile, None
    args = parse_command(argv).script_args
    # The job's reader (gpudoc.job.knobs) hands over the configs it read, Hydra's composed one
    # included; without it, the YAML/JSON files the arguments name.
    named = model_name_from_job(args, job_config_data(args, cwd) if config_data is None else config_data)
    if named is None:
        return profile, None
    path = find_model_config(named.name, bases=[cwd], environ=environ,
                             key=f"the job's {named.where.partition(':')[2]}")
    note = f"[model] from the job's {named.where.partition(':')[2]} = {named.name}: {path}"
    return replace(profile, model={"hf_config": str(path), **profile.model}), note
