"""Values as jobs spell them: flags, ``key=value`` overrides and config files, read leniently.

The framework readers (``gpudoc.frameworks``) share these: a config file that cannot be read
is a note on the reading, never an error (the job will say so itself), and a value that does not
parse is no value at all.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.configvalues import as_bool_text, count, num
from gpudoc.edits.argv import ArgEdits
from gpudoc.job.knobs import JobReading, is_count

if TYPE_CHECKING:
    from gpudoc.job.argv import JobCommand

# Precision as the frameworks spell it (Lightning's "bf16-mixed", "16-true", "32"; torch dtypes).
_PRECISION_WORDS = {"32-true": "fp32", "16-mixed": "fp16", "bf16-mixed": "bf16", "bf16-true": "bf16-true",
                    "16-true": "fp16-true", "32": "fp32", "16": "fp16", "bf16": "bf16", "64": "fp32",
                    "bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "no": "fp32", "fp32": "fp32",
                    "fp16": "fp16"}

# Where a job's own config (Hydra's, a Lightning YAML) keeps each knob: leaf names, best first.
GENERIC_KEYS: dict[str, tuple[str, ...]] = {
    "micro_batch_size": ("micro_batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu",
                         "batch_size", "train_batch_size"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", "accumulate_grad_batches",
                                    "grad_accum_steps", "gradient_accumulation", "accum_steps"),
    "gradient_checkpointing": ("gradient_checkpointing", "activation_checkpointing",
                               "enable_activation_checkpointing"),
    "max_seq_len": ("max_seq_len", "max_seq_length", "seq_len", "block_size", "max_length", "context_length"),
    "precision": ("precision",),
}


# Real training configs are kilobytes; the round-trip YAML parser takes seconds per megabyte, and a
# job's config is parsed more than once, so a 50 MB file would hold `run` for many minutes.
MAX_CONFIG_BYTES = 1 << 20


# -- shared ----------------------------------------------------------------------------------------
def load_config(path: Path, label: str, reading: JobReading, *, empty_ok: bool = False) -> Any:
    """A config file's data, or None with a note: reading never fails on the job's behalf.
    ``empty_ok``: an empty file is an empty mapping, as Hydra composes one (a group option such as
    ``none.yaml`` that sets nothing), not a config the job would fail on."""
    from gpudoc.edits import jsonedit, pyedit, yamledit
    from gpudoc.errors import GpudocError

    try:
        if not path.is_file():  # `--config <(...)`, a FIFO: reading would block, or take the job's bytes
            reading.notes.append(f"{label}: not read (not a regular file: its bytes are the job's to read)")
            return None
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            reading.notes.append(f"{label}: not read ({size / 2**20:.1f} MiB: larger than any training config; "
                                 f"gpudoc reads at most {MAX_CONFIG_BYTES >> 20} MiB)")
            return None
        text = path.read_text(encoding="utf-8")
        suffix = path.suffix.lower()
        if suffix == ".json":
            data = jsonedit.load(text, label)
        elif suffix in (".yaml", ".yml"):
            data = yamledit.plain(yamledit.load(text, label))
        elif suffix == ".py":
            data = pyedit.load(text, label)
        else:
            return None
    except (OSError, UnicodeDecodeError, GpudocError) as exc:
        reading.notes.append(f"{label}: not read ({exc})")
        return None
    if data is None and empty_ok:
        data = {}
    if isinstance(data, Mapping):
        reading.config_data.append((label, data))
        return data
    # Every framework read here takes a mapping of settings: say why none was read (the job fails on it).
    reading.notes.append(f"{label}: not read ({_kind(data)}, not a mapping of settings)")
    return None


def _kind(data: Any) -> str:
    if data is None:
        return "empty"
    if isinstance(data, bool):
        return "a boolean"
    return "a number" if isinstance(data, (int, float)) else "a list" if isinstance(data, list) else "text"


def script_tree(job: JobCommand, cwd: Path) -> ast.Module | None:
    """The job's own ``.py`` script, parsed (never run): what it imports and how it is decorated."""
    if not job.script or not job.script.endswith(".py"):
        return None
    path = cwd / job.script
    if not path.is_file():
        return None  # `python <(...)`: reading a pipe would block, or take the bytes python should get
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def flag_value(args: list[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The last ``--flag value`` / ``--flag=value`` of any of ``names``: (flag, value)."""
    found = [(o.name, o.value) for o in ArgEdits(args).find(names) if o.value is not None]
    return found[-1] if found else None


def cli_options(args: list[str], *, switches: bool = False) -> list[tuple[int, str, str]]:
    """(index, name, value) per option or positional, as jsonargparse reads them (LightningCLI,
    LitGPT): ``--flag value`` and ``--flag=value`` are one option; a positional's name and value
    are the token itself. ``switches``: as fire reads them (axolotl's ``-m axolotl.cli.train``), an
    option followed by another ``--`` option, or by nothing, is a switch, its value ""."""
    out = []
    i = 0
    while i < len(args):
        tok = args[i]
        name, eq, value = tok.partition("=")
        if not tok.startswith("-"):
            out.append((i, tok, tok))
            i += 1
            continue
        taken = 0 if eq else 1
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
            if switches and value.startswith("--"):
                value, taken = "", 0
        out.append((i, name, value))
        i += 1 + taken
    return out


def dangling_flag(args: list[str], names: tuple[str, ...]) -> str | None:
    """One of ``names`` that ends the command with no value after it (argparse refuses that)."""
    found = ArgEdits(args).find(names)
    return found[-1].name if found and found[-1].value is None else None


def bool_flag(args: list[str], name: str) -> bool | None:
    occs = ArgEdits(args).find((name,), boolean=True)
    if not occs:
        return None
    value = occs[-1].value
    return True if value is None else as_bool_text(value)


def to_int(text: str | None) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def override(tok: str) -> tuple[str, str] | None:
    """A Hydra/torchtune ``key=value`` (also ``+key=``, ``++key=``): (key, value)."""
    if tok.startswith("-") or "=" not in tok:
        return None
    key, _, value = tok.partition("=")
    key = key.lstrip("+")
    if not key or not all(part.isidentifier() or part.isdigit() for part in key.split(".")):
        return None
    return key, value


def typed(text: str) -> Any:
    word = as_bool_text(text)
    if word is not None:
        return word
    number = to_int(text)
    return number if number is not None else text


def precision_of(value: Any) -> str | None:
    text = str(value).strip().lower()
    return _PRECISION_WORDS.get(text)


def knob_value(knob: str, value: Any) -> Any:
    if knob == "precision":
        return precision_of(value)
    if knob == "gradient_checkpointing":
        return value if isinstance(value, bool) else as_bool_text(str(value))
    number = num(value) if not isinstance(value, str) else to_int(value)
    # Not a number: kept as written, for JobReading.set to name (None, "auto", ${...} say no value).
    return number if number is not None else count(value)


def usable(knob: str, value: Any) -> bool:
    """A value read from a key that only looks like the knob's (a leaf named ``batch_size``): a
    count that is no number, or none a job trains with (``-1`` for "all"), is some other setting,
    not an error that would refuse the job."""
    if value is None or knob in ("precision", "gradient_checkpointing"):
        return value is not None
    return is_count(knob, value)


def _leaves(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            out.extend(_leaves(value, (*prefix, str(key))))
    elif prefix:
        out.append((prefix, data))
    return out


def generic_knobs(data: Any) -> dict[str, tuple[str, Any]]:
    """A job's own config: each knob's (dotted key, value), the shallowest best-named leaf; keys
    that name evaluation or validation batches are not the training batch."""
    found: dict[str, tuple[str, Any]] = {}
    leaves = sorted(_leaves(data), key=lambda kv: len(kv[0]))
    for knob, names in GENERIC_KEYS.items():
        for name in names:
            for path, value in leaves:
                if path[-1] != name or any(p.startswith(("eval", "val", "test")) for p in path):
                    continue
                typed = knob_value(knob, value)
                if usable(knob, typed):
                    found[knob] = (".".join(path), typed)
                    break
            if knob in found:
                break
    return found


