"""What the job trained with, believed over what gpudoc read from outside: `fix`, `fix --apply/--rerun`
and `--retry-oom` climb the ladder from the knobs the probe saw in the failed run (``observed`` in its
record), not from the reading of the command line or a profile's ``[train]``, and say in one line
each where the two differ.

A knob gpudoc had no place for gets one only where the job is known to read it: a flag the job's
own parser declares (the probe saw the parser) that held exactly the value the job trained with, or
the key a nanoGPT-style configurator takes (``--key=value``). A config file that held another value
than the job ran with did not give the job its value (a Hydra group the command did not compose):
it is never written; the key of the config Hydra composed is, as an override. Where no place is
known, gpudoc says so and writes nothing for that knob: it never invents a flag the job's parser
lacks. A place that already holds what the job ran with is not written again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpudoc.configvalues import format_value

if TYPE_CHECKING:
    from gpudoc.profiles.model import Profile
    from gpudoc.runs.record import RunRecord

# The knobs whose observed value the ladder climbs from (a first batch's sequence length is not the
# job's max_seq_len under dynamic padding: that one stays as read).
BELIEVED = ("micro_batch_size", "gradient_accumulation_steps", "precision", "gradient_checkpointing")
# The knobs a flag of the job's own parser may be found to hold (whole numbers: a match means something).
PLACEABLE = ("micro_batch_size", "gradient_accumulation_steps")
# The place of a knob known only from what the probe saw: nothing gpudoc may write.
OBSERVED_ONLY = "observed"


def believe(profile: Profile, record: RunRecord | None) -> tuple[Profile, tuple[str, ...], dict[str, str]]:
    """``profile`` with the knobs the failed run was observed to train with; the lines that say what
    changed from the reading; and the knobs the job ran with that have no place gpudoc may write
    (knob -> why): the ladder knows their values (the global batch stays exact) but changes none."""
    seen = _believed_views(record)
    if not seen or record is None:
        return profile, (), {}
    job = profile.job
    places = dict(job.knobs) if job is not None else {}
    notes: list[str] = []
    changes: dict[str, Any] = {}
    placeless: list[str] = []
    for knob, view in seen.items():
        value, how = view["value"], view.get("how") or "observed"
        read = profile.train.get(knob)
        if read == value and type(read) is type(value) and (job is None or knob in places):
            continue
        place = places.get(knob) if job is not None else None
        # A file the reading found the knob in that did not give the job its value (a config group the
        # command did not compose, a later layer over it): a rung written there would change nothing.
        stale = place is not None and place.kind == "file" and place.value != value
        if job is not None and (place is None or stale):
            from gpudoc.job.knobs import Knob

            found, why, said, writer = _observed_place(job.framework, record.parsers or (), knob, value, place)
            if found is None:
                placeless.append(f"{knob} {format_value(value)} ({how}{'; ' + why if why else ''})")
                places[knob] = Knob(value, "default", OBSERVED_ONLY)  # as the job ran: nothing to write
                changes[knob] = value
                continue
            places[knob] = Knob(value, "argv", found)
            if writer is not None and writer != job.framework:  # written in that framework's syntax
                job = replace(job, framework=writer)
            notes.append(f"the job ran with {knob} {format_value(value)} ({how}), the value of {said}: a rung "
                         "of it is written there")
        else:
            where = (job.places.get(knob) if job is not None else f"[train] of {profile.name}") or "default"
            said = f"read {knob} {format_value(read)} ({where})" if read is not None else f"read no {knob}"
            notes.append(f"{said}; the job ran with {format_value(value)} ({how}): gpudoc goes by what it ran with")
            if place is not None:  # its place now holds what the job ran with: a rung that keeps it writes nothing
                places[knob] = replace(place, value=value)
        changes[knob] = value
    if placeless:
        notes.append(f"the job ran with {', '.join(placeless)}, but no place it reads them from is known, so no "
                     "rung changes them: gpudoc writes no flag the job's parser does not declare (bind one: "
                     "[bind] flags = { KNOB = \"--FLAG\" } in a profile)")
    if job is not None:
        profile = replace(profile, job=replace(job, knobs=places))
    # Known from the probe alone, now or in an earlier attempt of the chain: no rung may change them.
    unwritable = {knob: "the probe saw its value, but no place the job reads it from is known"
                  for knob, place in places.items() if place.kind == "default" and place.name == OBSERVED_ONLY}
    return profile.with_train(changes), tuple(notes), unwritable


def believed_values(record: RunRecord | None) -> dict[str, Any]:
    """Knob -> the value the probe saw ``record``'s job train with, for the knobs gpudoc believes it on."""
    return {knob: view["value"] for knob, view in _believed_views(record).items()}


def _believed_views(record: RunRecord | None) -> dict[str, dict]:
    observed = (record.observed if record is not None else None) or {}
    return {knob: view for knob in BELIEVED if isinstance(view := observed.get(knob), dict) and "value" in view}


def _observed_place(framework: str | None, parsers: Sequence[Mapping[str, Any]], knob: str, value: Any,
                    place: Any) -> tuple[str | None, str, str, str | None]:
    """Where the job is known to read ``knob`` (which held ``value``), for a knob the reading found
    no place for, or found in a file that did not give the job its value: (the flag or override key,
    None when none is known; why none; what it is, worded; the framework whose syntax writes it, when
    one of theirs answered: ``gpudoc.frameworks``)."""
    from gpudoc.frameworks import registry

    answer = registry.observed_place(framework, parsers, knob, value, place.name if place is not None else None)
    if place is not None:  # a stale file: a key of what the framework composed, set by an override
        stale = f"{place.where} held {format_value(place.value)}, not what the job ran with"
        if answer is None:
            return None, stale, "", None
        return answer[1].key, "", f"{answer[1].said} ({stale}), set by an override", answer[0].name
    if answer is not None:
        return answer[1].key, "", answer[1].said, answer[0].name
    flag, why = declared_flag(parsers, value) if knob in PLACEABLE else (None, "")
    return flag, why, f"its own {flag}, which its parser declares", None


def declared_flag(parsers: Sequence[Mapping[str, Any]], value: Any) -> tuple[str | None, str]:
    """The one flag of the job's parsers that held ``value``, or None and why not."""
    if not parsers:
        return None, "the probe saw no argument parser of the job"
    held = []
    for parser in parsers:
        if parser.get("type") == "configurator":
            continue  # its keys are written as it takes them (nanogpt.observed_place), never as --flag VALUE
        options = [o for o in parser.get("options") or () if isinstance(o, str) and o.startswith("--")]
        for dest, parsed in dict(parser.get("values") or {}).items():
            if parsed != value or isinstance(parsed, bool) or not isinstance(parsed, int):
                continue
            spellings = (f"--{dest}", f"--{dest.replace('_', '-')}")
            held += [o for o in options if o in spellings][:1]
    held = list(dict.fromkeys(held))
    if len(held) == 1:
        return held[0], ""
    if held:
        return None, f"{' and '.join(held)} each held {value}, so which one it is cannot be told"
    return None, f"no flag its parser declares held {value}"
