"""File presets: where each knob lives in the config files frameworks read (each framework's
``file_preset``, ``gpudoc.frameworks``; the registry finds one by name).

Each preset has ``write`` (knobs -> key-path assignments, plus what it could not express) and
``read`` (file -> the knob values it hard-codes, for the consistency check when a knob is set in
the profile but not bound into this file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpudoc.bind.filecontext import FileContext, FileResult, get
from gpudoc.bind.targets import fit


@dataclass(frozen=True)
class FilePreset:
    name: str
    assign: Callable[[Any, FileContext], FileResult]  # knobs -> key paths, unchecked
    read: Callable[[Any], dict[str, Any]]

    def write(self, data: Any, ctx: FileContext) -> FileResult:
        """The preset's assignments, each type-checked against the value it replaces by the check
        explicit bindings get (``targets.fit``): a preset never silently writes ``4`` over ``"8"``.
        DeepSpeed's ``"auto"``, ``null`` and OmegaConf placeholders take anything, as there."""
        res = self.assign(data, ctx)
        res.assignments = [
            (path, value if path in res.retyped else fit(get(data, path), value, file=ctx.name, key=".".join(path),
                                                          knob=knob), knob)
            for path, value, knob in res.assignments]
        return res


def detect_preset(data: Any, suffix: str) -> str | None:
    """Recognise a file's layout (for conflict checks on files bound by explicit key paths)."""
    if not isinstance(data, Mapping):
        return None
    if suffix == ".py":
        return "nanogpt" if "batch_size" in data or "block_size" in data else None
    if "zero_optimization" in data or "train_micro_batch_size_per_gpu" in data or "train_batch_size" in data:
        return "deepspeed"
    if "micro_batch_size" in data and "sequence_len" in data:
        return "axolotl"
    if "cutoff_len" in data or ("per_device_train_batch_size" in data and "stage" in data):
        return "llama-factory"
    if "distributed_type" in data and "compute_environment" in data:
        return "accelerate"
    if "batch_size" in data and "dtype" in data and "tokenizer" in data:
        return "torchtune"
    if isinstance(data.get("trainer"), Mapping) and isinstance(data.get("model"), Mapping) and \
            "micro_batch_size" in data["model"]:
        return "nemo"
    return None
