"""``[bind] overrides`` and ``[bind] flags``: knobs written in the job's own spelling on its command line.

A Hydra job's keys are its own (``data_loader.batch_size``), so no preset knows them; the reading of
the job (``gpudoc.job.knobs``) or the user names the key, and the override on the command line, which
beats the config file it overrides, is replaced in place or appended. A hand-written script's flags
are its own too (``--batch``): one is bound only where the job's parser is known to declare it (the
probe saw the parser, and the flag held the value the job trained with), then replaced in place or
appended as ``--flag value``.
"""

from __future__ import annotations

from typing import Any, Mapping

from gpudoc.bind.targets import targets
from gpudoc.configvalues import format_value
from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import ProfileError


def apply_overrides(ed: ArgEdits, bind: Mapping[str, Any], knobs: Mapping[str, Any]) -> set[str]:
    """Write each bound knob's ``key=value`` into the script's arguments; return the knobs so carried.
    A binding is the key, or ``{key = "trainer.precision", map = {bf16 = "bf16-mixed", ...}}`` where the
    job spells the knob's values its own way (as ``[bind.files]`` takes them)."""
    carried = set()
    for knob, spec in dict(bind.get("overrides") or {}).items():
        key = spec.get("key") if isinstance(spec, Mapping) else spec
        if not isinstance(key, str) or not key or key.startswith("-") or "=" in key:
            raise ProfileError(f"[bind.overrides] {knob}: expected a dotted key such as \"trainer.batch_size\", "
                               f"got {key!r}")
        if knob in knobs:
            [target] = targets("[bind.overrides]", knob, spec)
            ed.set_kv(key, format_value(target.value_for(knob, knobs[knob], f"[bind.overrides] {knob}")))
            carried.add(knob)
    return carried


def apply_flags(ed: ArgEdits, bind: Mapping[str, Any], knobs: Mapping[str, Any]) -> set[str]:
    """Write each bound knob as ``--flag value`` into the script's arguments; return the knobs so carried."""
    carried = set()
    for knob, flag in dict(bind.get("flags") or {}).items():
        if not isinstance(flag, str) or not flag.startswith("-") or "=" in flag or " " in flag:
            raise ProfileError(f"[bind.flags] {knob}: expected a flag of the job such as \"--batch\", got {flag!r}")
        if knob in knobs:
            ed.set_value((flag,), format_value(knobs[knob]))
            carried.add(knob)
    return carried
