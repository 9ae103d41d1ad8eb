"""torchtune: ``tune run RECIPE --config CFG key=value ...``.

Sources: ``--config`` (a file here; one of torchtune's built-in configs is said, not read), then the
overrides. Checkpoints: ``recipe_state.pt`` in its ``output_dir`` (``recipe_state/`` in newer
versions), resumed with the override ``resume_from_checkpoint=True``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.bind.args import ArgContext, PresetResult
from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filepresets import FilePreset
from gpudoc.configvalues import MISSING, get
from gpudoc.edits.argv import ArgEdits
from gpudoc.frameworks import base
from gpudoc.frameworks.base import Recognition
from gpudoc.frameworks.trainer_configs import read_simple
from gpudoc.job import checkpoints as ckpt
from gpudoc.job.argv import JobCommand
from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import flag_value, knob_value, load_config, override, typed

name = "torchtune"
arg_names: tuple[str, ...] = ("torchtune",)
trial_switches: base.TrialSwitches | None = None
echo: tuple[tuple[str, str], ...] = (  # the recipe's resolved-config dump
    ("micro_batch_size", r"^\s*batch_size\s*[=:]\s*(\d+)\s*$"),
    ("gradient_checkpointing", r"\benable_activation_checkpointing\s*[=:]\s*(true|false|True|False)\b"),
)
# The recipes' dtype, by the profile's precision: bf16 or fp32 (fp16 is refused by the recipes); a
# bf16 recipe trains in pure bf16, which the profile's bf16-true names exactly.
DTYPE: Mapping[str, str] = {"bf16": "bf16", "bf16-true": "bf16", "fp32": "fp32"}
_KEYS = {"batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
         "tokenizer.max_seq_len": "max_seq_len", "enable_activation_checkpointing": "gradient_checkpointing",
         "dtype": "precision", "model.lora_rank": "lora_rank"}


def recognise(job: JobCommand, cwd: Path) -> Recognition | None:
    return Recognition(True, "the tune CLI") if job.launcher == "tune" else None


# The estimate's ``[train] loss`` for each of torchtune's loss components. Its TransformerDecoder
# returns the logits in fp32 unless they are chunked (``self.output(h).float()``, torchtune/modules/
# transformer.py, v0.1.0 to 0.6), so torch's CrossEntropyLoss (its configs' loss up to 0.2) works on
# an fp32 copy of them; CEWithChunkedOutputLoss (0.3 on) upcasts one chunk at a time, and
# LinearCrossEntropyLoss projects one chunk at a time (no more than a chunked loss holds).
LOSSES = {"torch.nn.CrossEntropyLoss": "fp32_logits", "torch.nn.modules.loss.CrossEntropyLoss": "fp32_logits",
          "torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
          "torchtune.modules.loss.LinearCrossEntropyLoss": "chunked"}


def read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    _read(job, cwd, r)
    _loss(job.script_args, cwd, r)


def _loss(args: list[str], cwd: Path, r: JobReading) -> None:
    """``loss._component_`` as the job's config (or an override) says it, as the estimate's loss."""
    said: tuple[Any, str, str | None] | None = None
    for label, data in r.config_data:
        value = get(data, ("loss", "_component_"))
        if value is not MISSING:
            # A built-in config is no file here: said where torchtune's other built-in values are.
            said = (value, "file", label) if (cwd / label).is_file() else (value, "argv", None)
    for tok in args:
        over = override(tok)
        if over is not None and over[0] == "loss._component_":
            said = (over[1], "argv", None)
    if said is None:
        return
    loss = LOSSES.get(str(said[0]))
    if loss is None:
        r.notes.append(f"torchtune: loss {said[0]} is not one gpudoc knows: the estimate takes the full-vocabulary "
                       "loss ([train] loss says otherwise)")
        return
    r.set("loss", loss, said[1], "loss._component_", said[2])


def _read(job: JobCommand, cwd: Path, r: JobReading) -> None:
    args = job.script_args
    r.framework = name
    config = flag_value(args, ("--config",))
    in_bwd: tuple[Any, str] | None = None  # optimizer_in_bwd, and where it is said
    unasked = ""  # why torchtune's own loader did not answer, where it was asked
    if config is not None:
        from gpudoc.frameworks.asked import Unanswered
        from gpudoc.frameworks.torchtune_asked import loaded

        try:
            in_bwd = loaded(job, cwd, r, config[1], _KEYS, knob_value)
        except Unanswered as exc:
            unasked = f"its config loader could not be asked ({exc})"
        if in_bwd is not None:
            _optimizer_in_bwd(in_bwd, r)
            return
        if unasked and (cwd / config[1]).is_file():
            r.notes.append(f"torchtune: {unasked}; {config[1]} read by gpudoc's own reader")
    if config is not None:
        if (cwd / config[1]).is_file():
            data = load_config(cwd / config[1], config[1], r)
            for key, knob in _KEYS.items():
                value = get(data, tuple(key.split("."))) if data is not None else MISSING
                read = knob_value(knob, value) if value is not MISSING else None
                if read is not None:
                    r.set(knob, read, "file", key, config[1])
            if data is not None and "optimizer_in_bwd" in data:
                in_bwd = data["optimizer_in_bwd"], config[1]
        else:
            r.notes.append(f"torchtune: --config {config[1]} is one of torchtune's own configs (not a file here) "
                           f"and {unasked or 'torchtune was not asked'}: only the command's overrides were read; "
                           "`tune cp` it to bind its values")
    for tok in args:
        over = override(tok)
        if over is not None and over[0] in _KEYS:
            knob = _KEYS[over[0]]
            r.set(knob, knob_value(knob, over[1]), "argv", over[0])
        elif over is not None and over[0] == "optimizer_in_bwd":
            in_bwd = typed(over[1]), "the command"
    _optimizer_in_bwd(in_bwd, r)


def _optimizer_in_bwd(in_bwd: tuple[Any, str] | None, r: JobReading) -> None:
    if in_bwd is not None and in_bwd[0] is True:
        # torchtune's recipes raise "Gradient accumulation is not supported with optimizer in bwd":
        # accumulation stays 1, so it is no knob gpudoc may change (the ladder changes only knobs the
        # job declares; halving the batch then lowers the global batch, and says so).
        accum = r.knobs.pop("gradient_accumulation_steps", None)
        r.notes.append(f"torchtune: optimizer_in_bwd is on ({in_bwd[1]}): gradient accumulation stays at "
                       f"{accum.value if accum is not None else 1} (torchtune's recipes refuse more), so gpudoc "
                       "does not change gradient_accumulation_steps")


def edit_args(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    simple = {"micro_batch_size": "batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
              "max_seq_len": "tokenizer.max_seq_len"}
    for knob, key in simple.items():
        if knob in knobs:
            ed.set_kv(key, str(knobs[knob]))
            res.expressed.add(knob)
            res.overrides.add(knob)
    gc = knobs.get("gradient_checkpointing")
    if gc is not None:
        if isinstance(gc, bool):
            ed.set_kv("enable_activation_checkpointing", str(gc))
            res.expressed.add("gradient_checkpointing")
            res.overrides.add("gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = f"{name}: enable_activation_checkpointing is True/False; '{gc}' has no override"
    prec = knobs.get("precision")
    if prec is not None:
        if prec in DTYPE:
            ed.set_kv("dtype", DTYPE[prec])
            res.expressed.add("precision")
            res.overrides.add("precision")
            if prec == "bf16":
                res.notes.append("torchtune's dtype=bf16 trains in pure bf16 (no fp32 master weights); "
                                 "precision = \"bf16-true\" describes it exactly for `gpudoc estimate`")
        else:
            res.cannot["precision"] = f"{name}: dtype takes bf16 or fp32, not '{prec}'"
    if "lora_rank" in knobs:
        if knobs["lora_rank"]:
            ed.set_kv("model.lora_rank", str(knobs["lora_rank"]))
            res.overrides.add("lora_rank")
        res.expressed.add("lora_rank")
    if "offload_params" in knobs:
        if knobs["offload_params"] or any(t.startswith("fsdp_cpu_offload=") for t in ed.tokens):
            ed.set_kv("fsdp_cpu_offload", str(bool(knobs["offload_params"])))
        res.expressed.add("offload_params")
    reasons = {"zero_stage": "torchtune shards with FSDP, not DeepSpeed ZeRO",
               "offload_optimizer": "torchtune has no optimizer-state CPU offload override"}
    res.unsupported(knobs, reasons, lambda knob: f"{name}: {reasons[knob]}")
    return res


# The recipes' own limit, per epoch: the first epoch stops there.
step_limit = base.override_step_limit("max_steps_per_epoch")


def resume_switch(path: str) -> tuple[str, ...]:
    return ("resume_from_checkpoint=True",)


launches = base.no_launches

_DTYPES = ("bf16", "fp32", "fp16")


observed_place = base.no_observed_place


named_configs = base.no_named_configs


def knob_values(knob: str, version: str | None) -> Mapping[str, Any] | None:
    return DTYPE if knob == "precision" else None


def resolved(settings: Mapping[str, Any]) -> base.Resolved:
    """The config the recipe parsed (its file and ``key=value`` overrides, merged), flattened."""
    knobs = base.counted(settings, {"micro_batch_size": "batch_size",
                                    "gradient_accumulation_steps": "gradient_accumulation_steps",
                                    "max_seq_len": "tokenizer.max_seq_len"})
    if isinstance(settings.get("enable_activation_checkpointing"), bool):
        knobs["gradient_checkpointing"] = (settings["enable_activation_checkpointing"], "enable_activation_checkpointing")
    if settings.get("dtype") in _DTYPES:
        knobs["precision"] = (settings["dtype"], "dtype")
    return base.Resolved(knobs)


def checkpoints(args: list[str], cwd: Path, since: float | None) -> list[ckpt.Checkpoint]:
    out = None
    for tok in args:
        key, eq, value = tok.lstrip("+").partition("=")
        if eq and key == "output_dir":
            out = value
    config = ckpt.flag(args, "--config")
    if out is None and config:
        out = ckpt.config_value(cwd / config, ("output_dir",))
    if out is None:
        return []
    folder = cwd / out
    for state in (folder / "recipe_state" / "recipe_state.pt", folder / "recipe_state.pt"):
        if state.is_file() and ckpt.whole(state) and ckpt.recent(state, since):
            epochs = {int(m.group(1)): d for d in ckpt.children(folder) if (m := re.match(r"^epoch_(\d+)$", d.name))}
            # The recipe reads its state and the newest epoch's weights (its checkpointer's files).
            newest = (epochs[max(epochs)],) if epochs else ()
            return [ckpt.Checkpoint(name, ckpt.shown(state, cwd), max(epochs) if epochs else None, unit="epoch",
                                    proof=state, within=folder, holds=(state, *newest))]
    return []


defaults = base.no_defaults


# -- its config file ---------------------------------------------------------------------------------
def write_file(data: Any, ctx: FileContext) -> FileResult:
    res = FileResult()
    k = ctx.knobs
    for knob, path in (("micro_batch_size", ("batch_size",)),
                       ("gradient_accumulation_steps", ("gradient_accumulation_steps",)),
                       ("max_seq_len", ("tokenizer", "max_seq_len"))):
        if knob == "gradient_accumulation_steps" and int(k.get(knob) or 1) > 1 and \
                get(data, ("optimizer_in_bwd",)) is True:
            # The optimizer steps inside backward, per parameter: torchtune's recipes raise
            # "Gradient accumulation is not supported with optimizer in bwd" at startup.
            res.cannot[knob] = (f"torchtune ({ctx.name}): optimizer_in_bwd: True allows no gradient accumulation, "
                                f"and the profile asks for {k[knob]}; set optimizer_in_bwd: False in it, or keep "
                                "gradient_accumulation_steps = 1")
        elif knob in k:
            res.set(path, int(k[knob]), knob)
    gc = k.get("gradient_checkpointing")
    if gc is not None:
        if isinstance(gc, bool):
            res.set(("enable_activation_checkpointing",), gc, "gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = f"torchtune: enable_activation_checkpointing is True/False, not '{gc}'"
    prec = k.get("precision")
    if prec is not None:
        if prec in DTYPE:
            res.set(("dtype",), DTYPE[prec], "precision")
        else:
            res.cannot["precision"] = f"torchtune: dtype takes bf16 or fp32, not '{prec}'"
    if "lora_rank" in k:
        if get(data, ("model", "lora_rank")) is not MISSING:
            _lora_nested(res, data, ctx)
        elif k["lora_rank"]:
            res.cannot["lora_rank"] = f"torchtune ({ctx.name}): the model has no lora_rank (not a LoRA recipe config)"
        else:
            res.expressed.add("lora_rank")
    if "offload_params" in k:
        if k["offload_params"] or get(data, ("fsdp_cpu_offload",)) is not MISSING:
            res.set(("fsdp_cpu_offload",), bool(k["offload_params"]), "offload_params")
        res.expressed.add("offload_params")
    res.unsupported(k, ("zero_stage", "offload_optimizer"),
                    lambda knob: f"torchtune: no setting for {knob} (FSDP, not DeepSpeed)")
    return res


def _lora_nested(res: FileResult, data: Any, ctx: FileContext) -> None:
    rank = int(ctx.knobs["lora_rank"])
    if rank == 0:
        res.conflicts.append(f"{ctx.name}: model.lora_rank is set (LoRA recipe) but the profile says lora_rank = 0")
        res.expressed.add("lora_rank")
    else:
        res.set(("model", "lora_rank"), rank, "lora_rank")


def read_file(data: Any) -> dict[str, Any]:
    out = read_simple(data, {"micro_batch_size": "batch_size", "gradient_accumulation_steps":
                              "gradient_accumulation_steps", "max_seq_len": "tokenizer.max_seq_len",
                              "lora_rank": "model.lora_rank"},
                       bools={"gradient_checkpointing": "enable_activation_checkpointing"})
    out.pop("precision", None)
    dtype = get(data, ("dtype",))
    if dtype in ("bf16", "fp32"):  # as written: a bf16 recipe's precision is the profile's bf16
        out["precision"] = dtype
    return out


def has_layout(data: Mapping[str, Any], suffix: str) -> bool:
    """A torchtune recipe config: batch size, dtype and a tokenizer component."""
    return suffix != ".py" and "batch_size" in data and "dtype" in data and "tokenizer" in data


file_preset: FilePreset | None = FilePreset(name, write_file, read_file, has_layout)
