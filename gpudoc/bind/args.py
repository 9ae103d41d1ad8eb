"""Argument edits: put knobs into a framework's own command-line flags (each framework's ``edit_args``).

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

    def set_bool(self, names: tuple[str, ...], on: bool, *, explicit: bool = False) -> None:
        """``explicit``: the value is always written (``--flag=false``, ``--flag true``), for a parser
        whose default is on, where a flag left out is not off (TRL's configs)."""
        occs = self.find(names, boolean=True)
        for occ in occs:
            if occ.eq:
                self.replace[occ.index] = f"{occ.name}={_bool_word(on, occ.value)}"
            elif occ.value_index is not None:
                self.replace[occ.value_index] = _bool_word(on, occ.value)
            elif explicit:
                self.replace[occ.index] = f"{occ.name}={_bool_word(on, 'true')}"
            elif not on:
                self.replace[occ.index] = None  # bare flag: off means gone
        if not occs and explicit:
            self.append.extend([names[0], _bool_word(on, "True" if self.uses_explicit_bools() else "true")])
        elif not occs and on:
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
    version: str | None = None  # the framework's installed release, where the job's reading found it
    declared: frozenset[str] | None = None  # the flags the job's parser declares, where it was asked


# -- what the frameworks' argument writers share (``gpudoc.frameworks``: each one's ``edit_args``) ----
def set_flags(ed: ArgEdits, knobs: Mapping[str, Any], res: PresetResult, flags: Mapping[str, str],
              spell: Callable[[Any], str] = str) -> None:
    """Each knob of ``flags`` that ``knobs`` holds, written to its one flag (replaced in place, else
    appended) in the framework's spelling."""
    for knob, flag in flags.items():
        if knob in knobs:
            ed.set_value((flag,), spell(knobs[knob]))
            res.expressed.add(knob)


def optional_flag(ed: ArgEdits, knobs: Mapping[str, Any], res: PresetResult, name: str, knob: str,
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
