"""Hydra's own composition of the job's config (its compose API, asked in the job's interpreter).

What the command composes is what is read: a group option chosen on the command line
(``trainer=big``, ``+experiment=x``), interpolations (``${bs}``) resolved, ``+``/``++``/``~``
overrides applied. Where a knob lives decides how a changed value is written: the command's own
override; a file the job composes by default (the primary config or a default group file), edited
in place; a group file the command chose, an interpolated value, or a key no file holds, written as
an override of the composed key (Hydra's syntax), never into a file the job would not read so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.frameworks import asked, lightning
from gpudoc.job.argv import JobCommand
from gpudoc.job.interpreter import target_python
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import generic_knobs, script_tree

_OWN_OPTIONS = ("--config-path", "--config-name", "-cp", "-cn", "--config-dir", "-cd")


def overrides(args: list[str]) -> list[str]:
    """The command's overrides as Hydra takes them: ``key=value``, ``+key=``, ``++key=``, ``~key``
    (not Hydra's own options nor their values)."""
    out, skip = [], False
    for tok in args:
        if skip:
            skip = False
        elif tok in _OWN_OPTIONS:
            skip = True
        elif not tok.startswith("-") and ("=" in tok or tok.startswith("~")):
            out.append(tok)
    return out


def _key(tok: str) -> str:
    return tok.split("=", 1)[0].lstrip("+~")


def composed(job: JobCommand, cwd: Path, r: JobReading, config_dir: Path, config_name: str,
             version_base: str | None) -> bool:
    """The knobs of Hydra's composition into ``r``; False (with one note) when Hydra could not be
    asked, and gpudoc's own reader reads instead."""
    primary = config_dir / (config_name if config_name.endswith((".yaml", ".yml")) else f"{config_name}.yaml")
    python = target_python(job.argv, os.environ, str(cwd))
    said = overrides(job.script_args)
    if not config_dir.is_dir():
        return False  # gpudoc's own reader says the config is not there
    try:
        if python is None:
            raise asked.Unanswered("the job's interpreter was not found")
        answer = asked.ask({"framework": "hydra", "config_dir": str(config_dir.resolve()),
                            "config_name": config_name.removesuffix(".yaml").removesuffix(".yml"),
                            "overrides": said, "version_base": version_base},
                           python=python, cwd=cwd, files=config_dir.rglob("*.y*ml"))
    except asked.Unanswered as exc:
        why = str(exc)
        if not primary.is_file() and _stores_configs(job, cwd):
            why = ("its config is a structured config the job's own code registers (ConfigStore), which gpudoc "
                   "does not import")
        r.notes.append(f"hydra: Hydra could not compose {config_name} ({why}); read by gpudoc's own reader, "
                       "which may miss group options, interpolations and +/++ overrides")
        return False
    r.notes.extend(f"hydra: {note}" for note in answer.get("notes") or ())
    _place(answer, cwd, r, {_key(t) for t in said})
    _lightning_trainer(answer.get("config") or {}, r, python)
    return True


def _place(answer: dict[str, Any], cwd: Path, r: JobReading, command_keys: set[str]) -> None:
    config = answer.get("config") or {}
    provenance: dict[str, dict[str, Any]] = answer.get("provenance") or {}
    interpolated: dict[str, str] = answer.get("interpolated") or {}
    by_override: list[str] = []
    # A group option the command picks can change which files any other group composes (an
    # experiment's own defaults): then only the primary config is a file the job composes as written.
    picked = [g for g in answer.get("choices") or {} if g in command_keys]
    for knob, (key, value) in generic_knobs(config).items():
        source = provenance.get(key) or {}
        group = str(source.get("config_path") or "").rpartition("/")[0]
        if key in command_keys:
            r.set(knob, value, "argv", key)
        elif source.get("file") and key not in interpolated and (source.get("primary") or not picked):
            r.set(knob, value, "file", str(source["in_file"]), _relative(Path(source["file"]), cwd))
        else:
            r.set(knob, value, "argv", key)
            why = f"{interpolated[key]} in the config" if key in interpolated else \
                f"{group}={_choice(answer, group)}" + (" on the command line" if group in command_keys else
                                                       f", composed under {' '.join(picked)} from the command") \
                if group else "no file of the config"
            by_override.append(f"{knob} ({key}, from {why})")
    r.config_data.append((str(answer.get("primary") or "hydra"), config))
    if by_override:
        r.notes.append("hydra: composed by Hydra; changed with an override of the composed key, not in a file: "
                       + ", ".join(by_override))


def _lightning_trainer(config: Mapping[str, Any], r: JobReading, python: str) -> None:
    """A node the job instantiates as Lightning's Trainer: what it leaves unset runs the Trainer's own
    default (accumulation 1, every release; precision 32, "32-true" from 2.0), changed with the
    override Hydra takes for a key its config lacks (``+trainer.accumulate_grad_batches=N``); its
    precision is written as the release installed where the job runs spells it (the one its
    ``_target_`` is imported from)."""
    for key, node in config.items():
        if not (isinstance(node, Mapping) and node.get("_target_") in lightning.TRAINERS):
            continue
        version = lightning.trainer_release(str(node["_target_"]), python)
        values = lightning.precision_values(version)
        unset = []
        for knob, setting in (("gradient_accumulation_steps", "accumulate_grad_batches"), ("precision", "precision")):
            if knob not in r.knobs and setting not in node:
                default = lightning.defaults(version)[knob]
                r.set(knob, default, "argv", f"+{key}.{setting}")
                unset.append(f"{setting} = {values.get(default, default)}")
        # The precision read is this Trainer's (composed there, or its default): written in its spelling.
        place = r.knobs.get("precision")
        composed_at = generic_knobs(config).get("precision", ("",))[0]
        if place is not None and f"{key}.precision" in (composed_at, place.name.lstrip("+")):
            r.spellings["precision"] = values
            if place.kind == "file" and not isinstance(node.get("precision"), str):
                # A number in the file (16, Lightning 1's spelling, which 2.x still takes): a precision
                # spelled as a string is no number to write over it, so the composed key is overridden.
                r.set("precision", place.value, "argv", f"{key}.precision")
                r.notes.append(f"hydra: {place.path} holds {key}.precision as the number {node.get('precision')}; a "
                               f"change is the override {key}.precision=VALUE, spelled for Lightning "
                               f"{version or '2.x'}, not an edit of the file")
        if unset:
            r.notes.append(f"hydra: {key} is Lightning's Trainer ({node['_target_']}"
                           f"{f' {version}' if version else ''}) and sets no {', '.join(unset)}: the Trainer's "
                           f"defaults; changed with +{key}.KEY=VALUE")
        return


def _choice(answer: dict[str, Any], group: str) -> str:
    return str((answer.get("choices") or {}).get(group, "?"))


def _stores_configs(job: JobCommand, cwd: Path) -> bool:
    tree = script_tree(job, cwd)
    return tree is not None and "ConfigStore" in {getattr(n, "id", getattr(n, "attr", None)) for n in _names(tree)}


def _names(tree: Any) -> list[Any]:
    import ast

    return [n for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))]


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)
