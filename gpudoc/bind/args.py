"""Argument presets: put knobs into a framework's own command-line flags.

A preset never duplicates a flag the user wrote: it replaces the value in place (``--flag v``,
``--flag=v``, ``key=v``) and appends only what is absent. Work is expressed as edits on a token
list (replace token i, delete token i, append tokens) so that the same preset can edit an argv
or the flags inside a shell script (see ``shell.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from gpudoc.bind.values import as_bool_text, is_neutral

_PRECISION_KNOBS = ("fp32", "fp16", "bf16", "bf16-true", "fp16-true")


@dataclass
class Occurrence:
    index: int  # the flag token
    name: str
    value_index: int | None = None  # ``--flag value``: the value token
    eq: bool = False  # ``--flag=value`` in one token
    value: str | None = None


@dataclass
class ArgEdits:
    tokens: list[str]
    replace: dict[int, str | None] = field(default_factory=dict)  # None = delete the token
    append: list[str] = field(default_factory=list)

    def result(self) -> list[str]:
        out = []
        for i, tok in enumerate(self.tokens):
            new = self.replace.get(i, tok)
            if new is not None:
                out.append(new)
        return out + self.append

    # -- finding ----------------------------------------------------------------------------
    def find(self, names: tuple[str, ...], *, boolean: bool = False, eq_only: bool = False) -> list[Occurrence]:
        found = []
        for i, tok in enumerate(self.tokens):
            if self.replace.get(i, "") is None:
                continue
            for name in names:
                if tok.startswith(name + "="):
                    found.append(Occurrence(i, name, eq=True, value=tok[len(name) + 1:]))
                elif tok == name and not eq_only:
                    nxt = self.tokens[i + 1] if i + 1 < len(self.tokens) else None
                    if boolean:
                        if nxt is not None and as_bool_text(nxt) is not None and not nxt.startswith("-"):
                            found.append(Occurrence(i, name, i + 1, value=nxt))
                        else:
                            found.append(Occurrence(i, name))
                    else:
                        found.append(Occurrence(i, name, i + 1 if nxt is not None else None, value=nxt))
        return found

    def has(self, names: tuple[str, ...], **kw: Any) -> bool:
        return bool(self.find(names, **kw))

    def uses_explicit_bools(self) -> bool:
        """Does the command spell booleans as ``--flag True``? Then appended flags follow suit."""
        for i, tok in enumerate(self.tokens[:-1]):
            if tok.startswith("--") and "=" not in tok and self.tokens[i + 1] in ("True", "False", "true", "false"):
                return True
        return any(t.startswith("--") and t.split("=", 1)[-1] in ("True", "False") for t in self.tokens if "=" in t)

    # -- editing ----------------------------------------------------------------------------
    def set_value(self, names: tuple[str, ...], value: str, *, eq_only: bool = False,
                  append_form: str = "sep") -> bool:
        """Replace every occurrence's value; append ``names[0]`` when there is none."""
        occs = self.find(names, eq_only=eq_only)
        for occ in occs:
            if occ.eq:
                self.replace[occ.index] = f"{occ.name}={value}"
            elif occ.value_index is not None:
                self.replace[occ.value_index] = value
            else:
                self.append.append(value)  # ``--flag`` at the very end, value missing
        if not occs:
            if append_form == "eq":
                self.append.append(f"{names[0]}={value}")
            else:
                self.append.extend([names[0], value])
        return bool(occs)

    def set_bool(self, names: tuple[str, ...], on: bool) -> None:
        occs = self.find(names, boolean=True)
        for occ in occs:
            if occ.eq:
                self.replace[occ.index] = f"{occ.name}={_bool_word(on, occ.value)}"
            elif occ.value_index is not None:
                self.replace[occ.value_index] = _bool_word(on, occ.value)
            elif not on:
                self.replace[occ.index] = None  # bare flag: off means gone
        if not occs and on:
            self.append.extend([names[0], "True"] if self.uses_explicit_bools() else [names[0]])

    def remove(self, names: tuple[str, ...], *, boolean: bool = True) -> None:
        for occ in self.find(names, boolean=boolean):
            self.replace[occ.index] = None
            if occ.value_index is not None:
                self.replace[occ.value_index] = None

    def set_kv(self, key: str, value: str) -> None:
        """torchtune-style ``key=value`` override (Hydra's ``+key=`` / ``++key=`` keep their prefix)."""
        hits = [i for i, t in enumerate(self.tokens)
                if t.lstrip("+").startswith(key + "=") and self.replace.get(i, "") is not None]
        for i in hits:
            prefix = self.tokens[i][: len(self.tokens[i]) - len(self.tokens[i].lstrip("+"))]
            self.replace[i] = f"{prefix}{key}={value}"
        if not hits:
            self.append.append(f"{key}={value}")


def _bool_word(on: bool, old: str | None) -> str:
    word = "True" if on else "False"
    if old and old.islower():
        return word.lower()
    return word


@dataclass
class PresetResult:
    """What a preset did with the knobs: ``expressed`` knobs reach the job; ``cannot`` says why not."""

    expressed: set[str] = field(default_factory=set)
    overrides: set[str] = field(default_factory=set)  # written as ``key=value``: beats the config file
    cannot: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    deepspeed_files: list[str] = field(default_factory=list)

    def unsupported(self, knobs: Mapping[str, Any], names: Iterable[str], why: Callable[[str], str]) -> None:
        """Knobs this preset has no setting for: fine at their neutral value (there is nothing to
        change), an error before launch otherwise (SPEC: never a silent no-op)."""
        for knob in names:
            if knob in knobs:
                if is_neutral(knob, knobs[knob]):
                    self.expressed.add(knob)
                else:
                    self.cannot[knob] = why(knob)


@dataclass
class ArgContext:
    world_size: int
    launcher: str | None = None


# -- HF Trainer / accelerate / LLaMA-Factory's CLI -----------------------------------------------
HF_SEQ_FLAGS = ("--max_seq_length", "--model_max_length", "--cutoff_len", "--max_seq_len")
HF_LORA_FLAGS = ("--lora_r", "--lora_rank")


def hf_trainer(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    name = "hf-trainer"
    if "micro_batch_size" in knobs:
        ed.set_value(("--per_device_train_batch_size",), str(knobs["micro_batch_size"]))
        res.expressed.add("micro_batch_size")
    if "gradient_accumulation_steps" in knobs:
        ed.set_value(("--gradient_accumulation_steps",), str(knobs["gradient_accumulation_steps"]))
        res.expressed.add("gradient_accumulation_steps")
    gc = knobs.get("gradient_checkpointing")
    if gc is not None:
        if isinstance(gc, bool):
            # transformers 5 ignores its old --gradient_checkpointing once --activation_checkpointing is given.
            flag = "--activation_checkpointing" if ed.has(("--activation_checkpointing",)) else "--gradient_checkpointing"
            ed.set_bool((flag,), gc)
            res.expressed.add("gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = f"{name}: --gradient_checkpointing is on/off; '{gc}' has no flag"
    prec = knobs.get("precision")
    if prec is not None:
        if prec == "bf16":
            ed.set_bool(("--bf16",), True)
            ed.remove(("--fp16",))
        elif prec == "fp16":
            ed.set_bool(("--fp16",), True)
            ed.remove(("--bf16",))
        elif prec == "fp32":
            ed.remove(("--bf16",))
            ed.remove(("--fp16",))
        if prec in ("bf16", "fp16", "fp32"):
            res.expressed.add("precision")
        else:
            res.cannot["precision"] = (f"{name}: --bf16/--fp16 are mixed precision with fp32 master weights; "
                                       f"'{prec}' needs the model loaded in that dtype by the script")
    ds = ed.find(("--deepspeed",))
    for occ in ds:
        if occ.value and not occ.value.startswith("-"):
            res.deepspeed_files.append(occ.value)
    for knob in ("zero_stage", "offload_optimizer", "offload_params"):
        if knob in knobs and not ds and not is_neutral(knob, knobs[knob]):
            res.cannot[knob] = (f"{name}: {knob} reaches the Trainer only through the DeepSpeed JSON named by "
                                f"--deepspeed, and the command has no --deepspeed")
    _optional_flag(ed, knobs, res, name, "max_seq_len", HF_SEQ_FLAGS)
    _optional_flag(ed, knobs, res, name, "lora_rank", HF_LORA_FLAGS)
    return res


def _optional_flag(ed: ArgEdits, knobs: Mapping[str, Any], res: PresetResult, name: str, knob: str,
                   flags: tuple[str, ...], *, kv: bool = False) -> None:
    """Knobs whose flag name depends on the script: replace the one the user wrote, never guess."""
    if knob not in knobs:
        return
    value = knobs[knob]
    present = [f for f in flags if ed.has((f,))]
    if present:
        if knob == "lora_rank" and value == 0:
            res.conflicts.append(f"the command sets {present[0]} (LoRA) but the profile says lora_rank = 0 "
                                 f"(full fine-tune)")
            return
        for flag in present:
            ed.set_value((flag,), str(value))
        res.expressed.add(knob)
    elif is_neutral(knob, value):
        res.expressed.add(knob)
    else:
        res.cannot[knob] = (f"{name}: the command has none of {', '.join(flags)}; write the flag your "
                            f"script reads once (e.g. {flags[0]} {{{knob}}})")


# -- Lightning CLI -------------------------------------------------------------------------------
LIGHTNING_PRECISION = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed", "bf16-true": "bf16-true",
                       "fp16-true": "16-true"}


def lightning(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    name = "lightning"
    if "micro_batch_size" in knobs:
        batch_flags = ("--data.batch_size", "--data.init_args.batch_size")
        present = [f for f in batch_flags if ed.has((f,))] or [batch_flags[0]]
        ed.set_value((present[0],), str(knobs["micro_batch_size"]))
        res.expressed.add("micro_batch_size")
    if "gradient_accumulation_steps" in knobs:
        ed.set_value(("--trainer.accumulate_grad_batches",), str(knobs["gradient_accumulation_steps"]))
        res.expressed.add("gradient_accumulation_steps")
    if "precision" in knobs:
        ed.set_value(("--trainer.precision",), LIGHTNING_PRECISION[knobs["precision"]])
        res.expressed.add("precision")
    gc = knobs.get("gradient_checkpointing")
    if gc is not None:
        flags: tuple[str, ...] = ("--model.gradient_checkpointing", "--model.init_args.gradient_checkpointing",
                                  "--model.activation_checkpointing")
        present = [f for f in flags if ed.has((f,))]
        if present:
            ed.set_value((present[0],), str(gc).lower())
            res.expressed.add("gradient_checkpointing")
        elif is_neutral("gradient_checkpointing", gc):
            res.expressed.add("gradient_checkpointing")
        else:
            res.cannot["gradient_checkpointing"] = (f"{name}: the Trainer has no checkpointing flag; the command has "
                                                    f"none of {', '.join(flags)}")
    zero = int(knobs.get("zero_stage", 0) or 0)
    off_opt = bool(knobs.get("offload_optimizer", False))
    off_par = bool(knobs.get("offload_params", False))
    strategy = ed.find(("--trainer.strategy",))
    if zero > 0:
        if off_par and zero < 3:
            res.cannot["offload_params"] = f"{name}: parameter offload needs zero_stage = 3 (deepspeed_stage_3_offload)"
        value = f"deepspeed_stage_{zero}" + ("_offload" if (off_opt or off_par) and zero >= 2 else "")
        if off_opt and zero < 2:
            res.cannot["offload_optimizer"] = f"{name}: optimizer offload needs zero_stage >= 2"
        ed.set_value(("--trainer.strategy",), value)
        res.expressed.update(k for k in ("zero_stage", "offload_optimizer", "offload_params") if k in knobs and k not in res.cannot)
    else:
        if strategy and any((o.value or "").startswith("deepspeed") for o in strategy):
            ed.set_value(("--trainer.strategy",), "ddp")
        res.unsupported(knobs, ("zero_stage", "offload_optimizer", "offload_params"),
                        lambda knob: f"{name}: CPU offload goes through a DeepSpeed strategy; set zero_stage >= 2")
    _optional_flag(ed, knobs, res, name, "max_seq_len",
                   ("--data.max_seq_len", "--data.max_length", "--data.seq_len", "--data.block_size",
                    "--data.init_args.max_seq_len", "--model.max_seq_len"))
    _optional_flag(ed, knobs, res, name, "lora_rank", ("--model.lora_rank", "--model.lora_r",
                                                       "--model.init_args.lora_rank"))
    return res


# -- torchtune ---------------------------------------------------------------------------------
def torchtune(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    name = "torchtune"
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
        if prec in ("bf16", "bf16-true", "fp32"):
            ed.set_kv("dtype", "fp32" if prec == "fp32" else "bf16")
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


# -- nanoGPT -------------------------------------------------------------------------------------
NANOGPT_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def nanogpt_accum(knobs: Mapping[str, Any], world_size: int) -> int:
    """nanoGPT's gradient_accumulation_steps is the total over all ranks (train.py divides it)."""
    return int(knobs["gradient_accumulation_steps"]) * max(1, world_size)


def nanogpt_settings(knobs: Mapping[str, Any], world_size: int,
                     res: PresetResult) -> list[tuple[str, Any, str]]:
    """nanoGPT's config keys for the knobs, as (key, value, knob), whether they go on the command
    line (``--key=value``) or into a config ``.py``; what nanoGPT cannot take goes into ``res``."""
    settings: list[tuple[str, Any, str]] = []
    if "micro_batch_size" in knobs:
        settings.append(("batch_size", int(knobs["micro_batch_size"]), "micro_batch_size"))
    if "gradient_accumulation_steps" in knobs:
        total = nanogpt_accum(knobs, world_size)
        settings.append(("gradient_accumulation_steps", total, "gradient_accumulation_steps"))
        if world_size > 1:
            res.notes.append(f"nanoGPT divides gradient_accumulation_steps by the world size: passed "
                             f"{knobs['gradient_accumulation_steps']} x {world_size} = {total}")
    if "max_seq_len" in knobs:
        settings.append(("block_size", int(knobs["max_seq_len"]), "max_seq_len"))
    prec = knobs.get("precision")
    if prec is not None:
        if prec in NANOGPT_DTYPE:
            settings.append(("dtype", NANOGPT_DTYPE[prec], "precision"))
        else:
            res.cannot["precision"] = f"nanogpt: dtype is autocast (mixed) only; '{prec}' has no setting"
    res.unsupported(knobs, ("gradient_checkpointing", "zero_stage", "offload_optimizer", "offload_params", "lora_rank"),
                    lambda knob: f"nanogpt: train.py has no setting for {knob}")
    return settings


def nanogpt(ed: ArgEdits, knobs: Mapping[str, Any], ctx: ArgContext) -> PresetResult:
    res = PresetResult()
    for key, value, knob in nanogpt_settings(knobs, ctx.world_size, res):
        # nanoGPT's configurator accepts only ``--key=value``; ``--key value`` would be read as a config file.
        ed.set_value((f"--{key}",), str(value), eq_only=True, append_form="eq")
        res.expressed.add(knob)
    return res


ARG_PRESETS: dict[str, Callable[[ArgEdits, Mapping[str, Any], ArgContext], PresetResult]] = {
    "hf-trainer": hf_trainer,
    "accelerate": hf_trainer,
    "transformers": hf_trainer,
    "llama-factory": hf_trainer,
    "lightning": lightning,
    "torchtune": torchtune,
    "nanogpt": nanogpt,
}

# Flags whose meaning is unambiguous wherever they appear: used to spot a command that hard-codes
# a knob the profile sets but does not bind.
KNOWN_FLAGS = {
    "--per_device_train_batch_size": "micro_batch_size",
    "--gradient_accumulation_steps": "gradient_accumulation_steps",
    "--trainer.accumulate_grad_batches": "gradient_accumulation_steps",
    "--data.batch_size": "micro_batch_size",
    "--model_max_length": "max_seq_len",
    "--max_seq_length": "max_seq_len",
    "--cutoff_len": "max_seq_len",
}
