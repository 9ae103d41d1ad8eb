"""What a failed run's records tell the relaunch owner (``gpudoc.commands.relaunch``): its
diagnosis, the job's torch, whether a relaunch's changes reached the job, and where to bind a knob
that did not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.profiles.model import Profile
from gpudoc.runs.record import RunRecord, now_iso
from gpudoc.runs.store import RunStore

if TYPE_CHECKING:
    from gpudoc.facts.model import Facts
    from gpudoc.ladder.arrival import Arrival
    from gpudoc.workspace import Workspace


def record_diagnosis(record: RunRecord, store: RunStore) -> Diagnosis | None:
    """The record's diagnosis, or a fresh one from its log when the record has none."""
    if record.diagnosis is not None and record.diagnosis.cause:
        return record.diagnosis
    if not store.log_path(record.id).is_file():
        return None
    from gpudoc.diagnose.text import diagnose_text

    return diagnose_text(store.log_tail(record.id), exit_code=record.exit_code, own_pids=record.job_pids,
                         rank_hint=record.only_worker_rank)


def job_torch_facts(record: RunRecord, environ: Mapping[str, str]) -> Facts | None:
    """Facts holding only what the ladder needs from the job's torch: the allocator variable name,
    decided by the same interpreter rule `gpudoc run` used when it launched the job."""
    from gpudoc.facts.model import Facts, TorchFacts
    from gpudoc.facts.torch_probe import alloc_env_name
    from gpudoc.job.interpreter import target_python

    python = target_python(record.command, environ)
    try:
        name = alloc_env_name(python)
    except Exception:  # without it the ladder picks the name every torch reads
        return None
    return Facts(collected_at=now_iso(), source="none",
                 torch=TorchFacts(python=python or "", ok=True, alloc_env_name=name))


LOG_HEAD_BYTES = 1 << 20  # frameworks print their settings at the start: the banner is in the first MiB


def verify_arrival(before: RunRecord, after: RunRecord, store: RunStore) -> Arrival | None:
    """Whether ``after``'s knob changes (against ``before``, its parent) reached the job: first from
    what ``after``'s probe saw it train with, else from its log and OOM; kept in ``after``'s record.
    None when no knob changed (an environment-only rung)."""
    from gpudoc.commands.observed import believed_values
    from gpudoc.diagnose.echo import settings_seen
    from gpudoc.ladder.arrival import check_arrival

    old = before.knobs
    changes = {k: (old.get(k), v) for k, v in after.knobs.items() if old.get(k) != v}
    if not changes:
        return None
    try:
        with open(store.log_path(after.id), "rb") as log:
            head = log.read(LOG_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        head = ""
    arrival = check_arrival(changes, settings_seen(head), record_diagnosis(before, store),
                            record_diagnosis(after, store), observed=believed_values(after))
    after.arrival = arrival.to_dict()
    try:
        store.save(after)
    except OSError:
        pass  # the record is a convenience; the verdict is said on the terminal either way
    return arrival


def say_arrival(before: RunRecord, after: RunRecord, profile: Profile, ws: Workspace) -> Arrival | None:
    """``verify_arrival``, and each changed knob that did not reach the job said on stderr, with
    where to bind it (``profile``: the one ``after`` ran under). The caller decides whether its
    ladder stops."""
    arrival = verify_arrival(before, after, ws.store)
    if arrival is None or not arrival.missing:
        return arrival
    from gpudoc.configvalues import format_value

    for knob, why in arrival.missing.items():
        ws.console.error(f"gpudoc: {knob} = {format_value(after.knobs.get(knob))} did not reach the job: {why}; "
                         f"{how_to_bind(profile, knob)}")
    return arrival


UNREACHED_LOOKBACK = 32  # parents read back through a retry chain, at most


def unreached_knobs(record: RunRecord, store: RunStore) -> dict[str, tuple[str, str]]:
    """Knobs whose last change did not reach the job, as of ``record``: knob -> (the run that
    showed it, why). Read from ``record``'s own arrival and its parents': a knob stays unreached while the
    chain still holds the value the job did not see (a later rung of another knob does not
    prove the job now reads it)."""
    found: dict[str, tuple[str, str]] = {}
    current = record.knobs
    seen: set[str] = set()
    run: RunRecord | None = record
    while run is not None and run.id not in seen and len(seen) < UNREACHED_LOOKBACK:
        seen.add(run.id)
        missing = (run.arrival or {}).get("missing") or {}
        for knob, why in missing.items():
            if knob not in found and run.knobs.get(knob) == current.get(knob):
                found[str(knob)] = (run.id, str(why))
        run = store.record_or_none(run.parent) if run.parent else None
    return found


def how_to_bind(profile: Profile, knob: str) -> str:
    """Where a knob that did not arrive should be put, for this kind of profile."""
    if profile.job is not None:
        where = profile.job.places.get(knob, "the command")
        return (f"gpudoc wrote it to {where} and the job did not use it: make the job read it there, or describe "
                f"where it does with a profile (`gpudoc profile new NAME --from-run`, then its [bind])")
    return (f"bind {knob} where the job reads it: [bind] args = PRESET for its flags, [bind.files] for its "
            f"config file, a {{{knob}}} placeholder in the command, or read GPUDOC_{knob.upper()} in the job")
