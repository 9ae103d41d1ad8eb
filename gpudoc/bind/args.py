"""Argument edits: put knobs into a framework's own command-line flags (each framework's ``edit_args``).

A preset never duplicates a flag the user wrote: it replaces the value in place (``--flag v``,
``--flag=v``, ``key=v``) and appends only what is absent. Work is expressed as edits on a token
list (``gpudoc.edits.argv``) so that the same preset can edit an argv or the flags inside a
shell script (see ``shell.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from gpudoc.bind.values import is_neutral
from gpudoc.edits.argv import ArgEdits


@dataclass
class PresetResult:
    """What a preset did with the knobs: ``expressed`` knobs reach the job; ``cannot`` says why not."""

    expressed: set[str] = field(default_factory=set)
    overrides: set[str] = field(default_factory=set)  # written as ``key=value``: beats the config file
    cannot: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    # Config files it leaves to another framework's file preset: (file, preset, whether this
    # framework fills that file's "auto" values from its own flags: they stay "auto").
    follow: list[tuple[str, str, bool]] = field(default_factory=list)

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
