"""The helper's entry: one JSON request on stdin, answered by one line on stdout, ``MARKER`` then a
JSON object. Anything else on stdout (a framework's import may print) is not the answer.

Request: ``{"framework": "hydra", "config_dir", "config_name", "overrides", "version_base"?}``,
``{"framework": "torchtune", "config", "recipe"?, "overrides", "cwd"}``,
``{"framework": "lightning", "args", "cwd"}`` or ``{"framework": "litgpt", "command", "args", "cwd"}``
(``jsonargs.py``: for those two, ``setters`` (leaf key -> the layers that set it) and ``layers``), or
``{"framework": "hf-trainer" | "trl" | "llama-factory", ...}`` (``hf.py``: HF's, TRL's and LLaMA-Factory's
argument dataclasses), or ``{"framework": "axolotl", ...}`` (``axolotl_cli.py``: its CLI, load_cfg's
options and its config schema).

Answer: ``{"ok": true, "config": {...}, "interpolated": {key: text}, "versions": {...}}`` with, for
Hydra, ``choices`` (group -> option composed) and ``provenance`` (leaf key -> the defaults-list entry
that set it last), for torchtune ``file`` and ``builtin``; or ``{"ok": false, "reason": "..."}``.
"""

from __future__ import annotations

import json
import os
import sys
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

MARKER = "\x1egpudoc-reading "  # the record separator first: no printed text starts so
_HYDRA_OWN = ("hydra/hydra_logging=default", "hydra/job_logging=default", "hydra/launcher=basic", "hydra/sweeper=basic")


def _leaves(data: Any, prefix: str = "") -> list[str]:
    if isinstance(data, Mapping):
        out: list[str] = []
        for key, value in data.items():
            out.extend(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [prefix] if prefix else []


def _resolved(cfg: Any) -> tuple[dict, dict[str, str]]:
    """The config as plain data, each interpolation resolved where it resolves (one that does not
    stays as written), and the keys whose value was an interpolation, with its text."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=False)
    interpolated: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, f"{prefix}.{k}" if prefix else str(k)) for k, v in node.items()}
        if isinstance(node, str) and "${" in node:
            interpolated[prefix] = node
            try:
                value = OmegaConf.select(cfg, prefix, throw_on_resolution_failure=True)
                return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            except Exception:
                return node
        return node

    return walk(raw, ""), interpolated


def hydra(req: Mapping[str, Any]) -> dict[str, Any]:
    import hydra as hydra_pkg
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import open_dict

    overrides = list(req.get("overrides") or ())
    notes = []
    with initialize_config_dir(config_dir=req["config_dir"], version_base=req.get("version_base"), job_name="gpudoc"):
        try:
            cfg = compose(config_name=req["config_name"], overrides=overrides, return_hydra_config=True)
        except Exception as exc:
            if "hydra/" not in str(exc):
                raise
            # A plugin of Hydra's own (colorlog, a launcher) that this interpreter lacks: the job's
            # config does not depend on how Hydra logs or launches, so compose it with Hydra's defaults.
            notes.append(f"Hydra stops at \"{str(exc).splitlines()[0]}\" in this interpreter, and so will the job "
                         "unless that plugin is installed; its config was read with Hydra's default logging and launcher")
            overrides = [*overrides, *_HYDRA_OWN]
            cfg = compose(config_name=req["config_name"], overrides=overrides, return_hydra_config=True)
        choices = {str(k): str(v) for k, v in (cfg.hydra.runtime.choices or {}).items()
                   if not str(k).startswith("hydra/") and v is not None}
        provenance = _hydra_provenance(GlobalHydra.instance().config_loader(), req, overrides, RunMode.RUN)
        with open_dict(cfg):
            del cfg["hydra"]
        config, interpolated = _resolved(cfg)
    read = sorted({p["file"] for p in provenance.values() if p["file"]})
    return {"config": config, "interpolated": interpolated, "choices": choices, "provenance": provenance,
            "read_files": read, "notes": notes, "versions": {"hydra": hydra_pkg.__version__}}


def _hydra_provenance(loader: Any, req: Mapping[str, Any], overrides: list[str], mode: Any) -> dict[str, dict]:
    """Each leaf key -> the entry of Hydra's own defaults list that sets it last (the composition
    order): its config path, package and file where that entry is a file of the config directory."""
    from omegaconf import OmegaConf

    try:
        defaults = loader.compute_defaults_list(req["config_name"], overrides, mode).defaults
    except Exception:
        return {}
    found: dict[str, dict] = {}
    for entry in defaults:
        path = entry.config_path
        if not path or path.startswith("hydra/") or (entry.package or "").startswith("hydra"):
            continue
        loaded = loader.repository.load_config(path)
        if loaded is None:
            continue
        file = os.path.join(req["config_dir"], f"{path}.yaml")
        plain = OmegaConf.to_container(loaded.config, resolve=False)  # as written: no interpolation resolved
        if not isinstance(plain, dict):
            continue
        plain.pop("defaults", None)
        package = entry.package or ""
        for leaf in _leaves(plain):
            key = f"{package}.{leaf}" if package else leaf
            found[key] = {"config_path": path, "package": package, "in_file": leaf,
                          "file": file if os.path.isfile(file) else None, "primary": bool(entry.primary)}
    return found


def torchtune(req: Mapping[str, Any]) -> dict[str, Any]:
    """``tune run``'s lookup (a built-in config's name first, then a file), then the recipe's
    parser's merge of the ``key=value`` overrides."""
    from importlib.metadata import version

    from omegaconf import OmegaConf

    tt = _package_alone("torchtune")
    from torchtune._recipe_registry import get_all_recipes  # type: ignore[import-untyped]

    name = str(req["config"])
    recipes = get_all_recipes()
    ordered = [r for r in recipes if r.name == req.get("recipe")] + recipes
    builtin = next((c for r in ordered for c in r.configs if c.name == name), None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(tt.__file__)))
    path = os.path.join(root, "recipes", "configs", builtin.file_path) if builtin is not None \
        else os.path.join(str(req["cwd"]), name)
    if not os.path.isfile(path):
        raise ValueError(f"{name} is neither one of torchtune's built-in configs nor a file")
    # Its config loader imports torch (seconds): only once there is a config to merge.
    from torchtune.config._utils import _merge_yaml_and_cli_args  # type: ignore[import-untyped]

    yaml = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(yaml, dict):
        raise ValueError(f"{path}: not a mapping of settings")
    cfg = _merge_yaml_and_cli_args(Namespace(**{str(k): v for k, v in yaml.items()}), list(req.get("overrides") or ()))
    config, interpolated = _resolved(cfg)
    return {"config": config, "interpolated": interpolated, "file": path, "builtin": builtin is not None,
            "read_files": [path],
            "versions": {"torchtune": version("torchtune")}}


def _package_alone(name: str) -> Any:
    """The installed package ``name`` without running its ``__init__``: torchtune's imports its models,
    datasets and generation code (seconds of CPU), and its recipe registry and config loader need
    none of them. Its submodules import as usual."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"No module named '{name}'")
    package = importlib.util.module_from_spec(spec)  # its __path__ set, its code not run
    sys.modules[name] = package
    return package


def _beside(file: str, name: str) -> Any:
    """The reader ``name`` of ``file`` beside this one, loaded by path as ``run.py`` loads this one
    (no package to import it from), and only when asked: each imports its own frameworks."""
    def ask(req: Mapping[str, Any]) -> dict[str, Any]:
        import importlib.util

        spec = importlib.util.spec_from_file_location(f"gpudoc_readhelper_{file[:-3]}",
                                                      os.path.join(os.path.dirname(os.path.abspath(__file__)), file))
        if spec is None or spec.loader is None:
            raise RuntimeError(f"the reader helper's {file} is missing")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return dict(getattr(module, name)(req))
    return ask


_JSONARGS = {"lightning": _beside("jsonargs.py", "lightning"), "litgpt": _beside("jsonargs.py", "litgpt")}


def answer(request: str) -> dict[str, Any]:
    try:
        req = json.loads(request)
        ask = {**_JSONARGS, "hydra": hydra, "torchtune": torchtune, "hf-trainer": _beside("hf.py", "hf_trainer"),
               "trl": _beside("hf.py", "trl"),
               "llama-factory": _beside("hf.py", "llama_factory"), "axolotl": _beside("axolotl_cli.py", "axolotl")}[req["framework"]]
    except (ValueError, KeyError, TypeError) as exc:
        return {"ok": False, "reason": f"not a request: {exc}"}
    try:
        return {"ok": True, **ask(req)}
    except ImportError as exc:
        return {"ok": False, "reason": f"{req['framework']} is not importable here ({' '.join(str(exc).split())})"}
    except Exception as exc:
        said = str(exc).strip().splitlines()
        return {"ok": False, "reason": f"{type(exc).__name__}: {said[0] if said else ''}"}


def main() -> int:
    request = sys.stdin.read()
    sys.stdout.write("\n" + MARKER + json.dumps(answer(request), default=str) + "\n")
    sys.stdout.flush()
    return 0
