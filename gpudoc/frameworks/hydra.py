"""Hydra: ``@hydra.main`` scripts and ``--config-path``/``--config-name``, then ``key=value`` overrides.

Sources in Hydra's order: the primary config with its defaults list's group files (the primary's own
keys last, as ``_self_``), then the command's overrides. The keys are the job's own: an override
names the key in the composed config.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpudoc.bind.filepresets import FilePreset
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import (
    GENERIC_KEYS,
    flag_value,
    generic_knobs,
    knob_value,
    load_config,
    override,
    script_tree,
    usable,
)

name = "hydra"
file_preset: FilePreset | None = None
arg_names: tuple[str, ...] = ()  # the keys are the job's own: `[bind] overrides`
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = ()
_OPTIONS = ("--config-path", "--config-name", "-cp", "-cn")


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    if declared(job, cwd):
        return Recognition(True, "@hydra.main or Hydra's --config-path/--config-name")
    # A `key=value` token alone: Hydra's shape, taken when no framework is sure.
    if any(override(a) for a in job.script_args):
        return Recognition(False, "key=value overrides")
    return None


def declared(job: JobCommand, cwd: Path) -> bool:
    """Hydra's own options on the command line, or ``@hydra.main`` in the script."""
    return any(a in _OPTIONS or a.startswith(("--config-path=", "--config-name=")) for a in job.script_args) \
        or _hydra_main(job, cwd) is not None


def _hydra_main(job: JobCommand, cwd: Path) -> tuple[str | None, str | None, str | None] | None:
    """``@hydra.main(config_path=..., config_name=..., version_base=...)`` in the script, as written."""
    tree = script_tree(job, cwd)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) in ("hydra.main", "main"):
                    kw = {k.arg: k.value.value for k in deco.keywords
                          if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)}
                    if "config_name" in kw or "config_path" in kw:
                        return kw.get("config_path"), kw.get("config_name"), kw.get("version_base")
    return None


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    args = job.script_args
    r.framework = name
    path_opt = flag_value(args, ("--config-path", "-cp"))
    name_opt = flag_value(args, ("--config-name", "-cn"))
    declared_at = _hydra_main(job, cwd) or (None, None, None)
    script_dir = (cwd / job.script).parent if job.script else cwd
    config_dir = (cwd / path_opt[1]) if path_opt else (script_dir / declared_at[0]) if declared_at[0] else None
    config_name = name_opt[1] if name_opt else declared_at[1]
    if config_dir is not None and config_name:
        from gpudoc.frameworks.hydra_asked import composed

        if composed(job, cwd, r, config_dir, config_name, declared_at[2]):
            return
    data: Any = None
    full_keys: dict[str, str] = {}  # knob -> its key in the composed config (what an override names)
    if config_dir is not None and config_name:
        file = config_dir / (config_name if config_name.endswith((".yaml", ".yml")) else f"{config_name}.yaml")
        label = _relative(file, cwd)
        data = load_config(file, label, r, empty_ok=True) if file.is_file() else None
        if data is None:  # unreadable: load_config said why; missing: said here
            if not file.is_file():
                r.notes.append(f"hydra: config {label} not found; only the command's overrides were read")
        else:
            for knob, (key, value) in generic_knobs(data).items():
                r.set(knob, value, "file", key, label)
                full_keys[knob] = key
            _groups(data, config_dir, cwd, r, full_keys)
    for tok in args:
        over = override(tok)
        if over is None:
            continue
        key, value = over
        for knob, names in GENERIC_KEYS.items():
            typed_value = knob_value(knob, value)
            if full_keys.get(knob) == key or (knob not in r.knobs and key.split(".")[-1] in names
                                              and usable(knob, typed_value)):
                r.set(knob, typed_value, "argv", key)
                full_keys[knob] = key


def _groups(data: Mapping[str, Any], config_dir: Path, cwd: Path, r: JobReading,
            full_keys: dict[str, str]) -> None:
    """Hydra's defaults list: ``- group: option`` puts ``group/option.yaml`` under ``group``. A key
    the primary config sets itself wins, as with Hydra's default order (``_self_`` last)."""
    for entry in data.get("defaults") or ():
        if not isinstance(entry, Mapping) or len(entry) != 1:
            continue
        (group, option), = entry.items()
        file = config_dir / str(group) / f"{option}.yaml"
        if not file.is_file():
            continue
        label = _relative(file, cwd)
        for knob, (key, value) in generic_knobs(load_config(file, label, r, empty_ok=True)).items():
            if knob not in full_keys:
                r.set(knob, value, "file", key, label)
                full_keys[knob] = f"{group}.{key}"


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)


defaults = base.no_defaults
edit_args = base.no_edit_args
step_limit = base.no_step_limit
resume_switch = base.no_resume_switch
checkpoints = base.no_checkpoints
launches = base.no_launches
resolved = base.no_resolved


knob_values = base.no_knob_values
named_configs = base.no_named_configs


def observed_place(parsers: Sequence[Mapping[str, Any]], knob: str, value: Any,
                   stale: str | None) -> base.ObservedPlace | None:
    """For a knob found in a file that did not give the job its value (a group the command did not
    compose): the one key of the config Hydra composed (the probe saw it) that ends in the same name
    and held ``value``, which a ``key=value`` override sets."""
    if stale is None:
        return None
    held = [key for parser in parsers if parser.get("type") == "hydra"
            for key, composed in dict(parser.get("values") or {}).items()
            if (key == stale or key.endswith(f".{stale}")) and composed == value and type(composed) is type(value)]
    return base.ObservedPlace(held[0], f"{held[0]} in the config Hydra composed") if len(held) == 1 else None
