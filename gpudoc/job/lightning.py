"""LightningCLI: which commands are its, and what its ``--config`` files and ``--section.key`` flags say.

jsonargparse applies ``--config`` files and flags in command-line order, a later one winning. A
``--config`` before the subcommand (``train.py --config cfg.yaml fit``) is the top-level parser's: its
keys sit under the subcommand's name (``fit.data.batch_size``). A script built with ``run=False``
has no subcommand at all (``train.py --config cfg.yaml``).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.filecontext import MISSING, get
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import knob_value, load_config, script_tree

SUBCOMMANDS = ("fit", "validate", "test", "predict")
_KEYS = {
    "micro_batch_size": ("data.batch_size", "data.init_args.batch_size"),
    "gradient_accumulation_steps": ("trainer.accumulate_grad_batches",),
    "precision": ("trainer.precision",),
    "gradient_checkpointing": ("model.gradient_checkpointing", "model.init_args.gradient_checkpointing",
                               "model.activation_checkpointing"),
    "max_seq_len": ("data.max_seq_len", "data.max_length", "data.seq_len", "data.block_size",
                    "data.init_args.max_seq_len", "model.max_seq_len"),
    "lora_rank": ("model.lora_rank", "model.lora_r", "model.init_args.lora_rank"),
}
# The top-level keys of LightningCLI's parser: jsonargparse refuses a config holding any other, so a
# YAML made of these alone (with a section of its own) is a LightningCLI config.
_TOP = frozenset({"seed_everything", "trainer", "model", "data", "optimizer", "lr_scheduler", "ckpt_path",
                  "weights_only"})


def is_lightning_cli(job: JobCommand, args: list[str], cwd: Path) -> bool:
    """LightningCLI's ``--section.key`` flags or a subcommand first say so at once. A ``--config``
    alone (``train.py --config cfg.yaml``, ``train.py --config cfg.yaml fit``) is LightningCLI's only
    with evidence: the script imports LightningCLI, or the YAML is LightningCLI's own shape. A plain
    script's ``--config some.yaml`` stays what it was."""
    if any(a.startswith(("--trainer.", "--data.", "--model.")) for a in args) or (
            args and args[0] in SUBCOMMANDS):
        return True
    configs = [value for _, name, value in _tokens(args) if name in ("--config", "-c")]
    if not configs:
        return False
    tree = script_tree(job, cwd)
    if tree is not None and any(_names_lightning_cli(node) for node in ast.walk(tree)):
        return True
    sub = _subcommand(args)
    for config in configs:
        if (cwd / config).is_file() and config.endswith((".yaml", ".yml", ".json")):
            data = load_config(cwd / config, config, JobReading())
            if data is not None and _shaped(data.get(sub[1]) if sub and sub[1] in data else data):
                return True
    return False


def _names_lightning_cli(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return any(alias.name == "LightningCLI" for alias in node.names)
    return (isinstance(node, ast.Attribute) and node.attr == "LightningCLI") or (
        isinstance(node, ast.Name) and node.id == "LightningCLI")


def _shaped(data: Any) -> bool:
    if not isinstance(data, Mapping) or not set(data) <= _TOP:
        return False
    sections = [data.get(s) for s in ("model", "data")]
    return isinstance(data.get("trainer"), Mapping) or any(
        isinstance(s, Mapping) and ("class_path" in s or "init_args" in s) for s in sections)


def _tokens(args: list[str]) -> list[tuple[int, str, str]]:
    """(index, name, value) per option or positional, as jsonargparse reads them: ``--flag value``
    and ``--flag=value`` are one option; a positional's name and value are the token itself."""
    out = []
    i = 0
    while i < len(args):
        tok = args[i]
        name, eq, value = tok.partition("=")
        if not tok.startswith("-"):
            out.append((i, tok, tok))
            i += 1
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        out.append((i, name, value))
        i += 1 if eq else 2
    return out


def _subcommand(args: list[str]) -> tuple[int, str] | None:
    """The subcommand (``fit``, ...) and its index: the first positional argument."""
    for i, name, _value in _tokens(args):
        if not name.startswith("-"):
            return (i, name) if name in SUBCOMMANDS else None
    return None


def read(job: JobCommand, args: list[str], cwd: Path, r: JobReading) -> None:
    r.framework = "lightning"
    r.set("gradient_accumulation_steps", 1, "default", "lightning")
    r.set("precision", "fp32", "default", "lightning")
    sub = _subcommand(args)
    # jsonargparse applies --config files and flags in the order given; a --config before the
    # subcommand is the top-level parser's, whose keys sit under the subcommand's name (fit.data...).
    for i, name, value in _tokens(args):
        if name in ("--config", "-c"):
            data = load_config(cwd / value, value, r) if (cwd / value).is_file() else None
            prefix = f"{sub[1]}." if sub is not None and i < sub[0] else ""
            for knob, keys in _KEYS.items():
                for key in keys:
                    found = get(data, tuple((prefix + key).split("."))) if data is not None else MISSING
                    typed = knob_value(knob, found) if found is not MISSING else None
                    if typed is not None:
                        r.set(knob, typed, "file", prefix + key, value)
                        break
        elif name.startswith("--"):
            for knob, keys in _KEYS.items():
                if name[2:] in keys:
                    r.set(knob, knob_value(knob, value), "argv", name)
