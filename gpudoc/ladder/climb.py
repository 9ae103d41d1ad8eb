"""The tuning ladder: diagnosis + profile (+ facts, history, estimate) -> the next changes to try.

``suggest`` climbs down after a GPU OOM; ``upward`` proposes the opposite rung after a run that
left a lot of memory unused. Both are pure: writing the profile is ``gpudoc.profiles.edit``'s job.
"""

from __future__ import annotations

from typing import Any, Iterable

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder.context import Context, Savings, capacity_from, shortfall
from gpudoc.ladder.cost import cheaper_first, measured, speed_back
from gpudoc.ladder.evidence import Evidence, family_of
from gpudoc.ladder.model import LadderResult, PastRun, Skipped, Suggestion
from gpudoc.ladder.rungs import BUILTIN_RUNGS, RUNG_NAMES, split_global_batch, user_rung
from gpudoc.profiles.model import Profile
from gpudoc.units import format_bytes

__all__ = ["RUNG_NAMES", "LadderResult", "Skipped", "Suggestion", "split_global_batch", "suggest", "upward"]

MEMORY_CAUSE = "gpu_oom"


def suggest(
    diagnosis: Diagnosis,
    profile: Profile,
    facts: Any = None,
    history: Iterable[PastRun] = (),
    *,
    allow_semantic: bool = False,
    estimate: Any = None,
    evidence: Evidence | None = None,
) -> LadderResult:
    """The rungs that apply to this failure and profile, in the order to try them.

    ``history`` holds earlier runs of the same profile (configurations that already ran out of memory are not proposed again; measured
    peaks refine the savings). ``estimate`` is the current profile's ``Estimate`` or an estimator
    callable ``(profile, *, gpu_total_bytes, history) -> Estimate``; by default gpudoc's own.
    ``evidence``: what the attempts so far proved (``gpudoc.ladder.evidence``): the families of
    rungs it rules out are skipped, with the reason.
    """
    diag = diagnosis
    history = tuple(history)
    allow_semantic = bool(allow_semantic or profile.allow_semantic)
    cause = diag.cause
    if cause != MEMORY_CAUSE:
        # A log alone (no exit status) that shows no failure proves no success either.
        return LadderResult(notes=[_not_memory_note(None if cause == "ok" and diag.exit_code is None else cause)])

    capacity = capacity_from(diag, facts, profile, history)
    savings = Savings(profile, estimate=estimate, history=history, capacity_bytes=capacity)
    short, short_source = shortfall(diag, savings, capacity, profile.target_utilization)
    ctx = Context(
        diagnosis=diag,
        profile=profile,
        facts=facts,
        history=history,
        allow_semantic=allow_semantic,
        savings=savings,
        capacity_bytes=capacity,
        shortfall_bytes=short,
        shortfall_source=short_source,
    )
    notes: list[str] = list(savings.notes)
    # Savings decide only when something predicts them (an estimate or measured runs); with
    # neither, the order alone decides.
    measured = any(r.peak_bytes for r in history)
    skip_by_saving = (
        short is not None
        and (savings.current_peak is not None or measured)
        and _savings_trustworthy(diag, savings, notes)
    )

    outcomes = [fn(ctx) for _, fn in BUILTIN_RUNGS]
    outcomes += [user_rung(ctx, spec) for spec in profile.user_rungs]

    evidence = evidence or Evidence()
    failed_configs = _failed_configs(history)
    ruled_out = evidence.ruled_out()
    skipped: list[Skipped] = []
    candidates: list[Suggestion] = []
    for outcome in outcomes:
        if isinstance(outcome, Skipped):
            skipped.append(outcome)
            continue
        family = family_of(outcome.rung, outcome.changes)
        if family in ruled_out:
            skipped.append(Skipped(outcome.rung, f"{ruled_out[str(family)]}; {outcome.rung} acts on the {family}"))
            continue
        tried = _tried_in(outcome, profile, failed_configs)
        if tried:
            skipped.append(Skipped(outcome.rung, f"already tried in run {tried}, which ran out of memory too"))
            continue
        candidates.append(outcome)

    if skip_by_saving:
        covering = [
            s for s in candidates
            if s.expected_saving_bytes is None or (short is not None and s.expected_saving_bytes >= short)
        ]
        if any(s.expected_saving_bytes is not None for s in covering):
            for s in candidates:
                if s not in covering:
                    saving = s.expected_saving_bytes or 0
                    what = (f"expected to free {format_bytes(saving)}, less than" if saving >= 0 else
                            f"expected to use about {format_bytes(-saving)} more per GPU, against")
                    skipped.append(Skipped(s.rung, f"{what} the {format_bytes(short)} shortfall ({short_source})"))
            candidates = covering
        else:
            notes.append(
                f"no single rung is expected to cover the {format_bytes(short)} shortfall "
                f"({short_source}); apply them in order"
            )

    candidates, cheaper = cheaper_first(candidates, short if skip_by_saving else None, history)
    notes += cheaper
    candidates = _spenders_last(candidates, notes)
    suggestions = [s for s in candidates if allow_semantic or not s.semantic]
    held_back = [s for s in candidates if s.semantic and not allow_semantic]
    exhausted = not suggestions
    if held_back and not allow_semantic:
        names = ", ".join(s.rung for s in held_back)
        if exhausted:
            notes.append(
                f"the non-semantic ladder is exhausted; rungs that change the experiment are held back: "
                f"{names} (use --allow-semantic or [ladder] allow_semantic = true)"
            )
        else:
            notes.append(f"held back (they change the experiment; use --allow-semantic): {names}")
    elif exhausted:
        notes.append("the ladder is exhausted: no rung applies to the knobs this profile declares")
    if not profile.knobs:
        notes.append("the profile declares no [train] knobs, so only environment and process rungs can apply")
    return LadderResult(
        suggestions=suggestions,
        exhausted=exhausted,
        semantic_held_back=held_back,
        notes=notes,
        skipped=skipped,
        shortfall_bytes=short,
    )


def _not_memory_note(cause: str | None) -> str:
    what = {
        "host_oom": "the host ran out of RAM (kernel OOM killer), not the GPU: fewer DataLoader workers, "
        "a smaller prefetch, or CPU offload turned off help; the GPU ladder does not",
        "shm": "shared memory (/dev/shm) ran out: raise the container's --shm-size or use fewer DataLoader workers",
        "nccl_timeout": "a collective timed out: usually another rank failed or hung first; look for its error",
        "signal": "the job was killed from outside",
        "ok": "the run did not fail",
        None: "no failure was found in the log",
    }
    return "not a GPU memory failure: " + what.get(cause, "the job failed for another reason (see the summary)")


def _savings_trustworthy(diag: Diagnosis, savings: Savings, notes: list[str]) -> bool:
    """Skip by saving only when the estimate agrees with what the run measured."""
    peak = savings.current_peak
    allocated = diag.allocated_bytes
    requested = diag.requested_bytes
    if peak is None or allocated is None or requested is None:
        return True
    measured_need = allocated + requested
    if peak < 0.9 * measured_need:
        notes.append(
            f"the estimate ({format_bytes(peak)}) is below what the run needed "
            f"({format_bytes(measured_need)} allocated + requested): savings may be understated, "
            "so no rung is skipped for its saving"
        )
        return False
    return True


def _failed_configs(history: tuple[PastRun, ...]) -> list[tuple[str, dict, dict, frozenset[str]]]:
    """The configurations that ran out of memory, each with the knobs whose change never reached
    the job in that run (it ran their old values under the new names)."""
    return [(r.id, r.knobs, r.env, frozenset((r.arrival or {}).get("missing") or ())) for r in history if r.failed_oom]


def _spenders_last(candidates: list[Suggestion], notes: list[str]) -> list[Suggestion]:
    """A rung expected to use more memory goes after every rung expected to free some (or not
    known to spend), so that it is never applied first; said, with its figure."""
    spenders = [s for s in candidates if s.expected_saving_bytes is not None and s.expected_saving_bytes < 0]
    rest = [s for s in candidates if s not in spenders]
    if spenders and rest and candidates.index(spenders[0]) < len(rest):
        for s in spenders:
            notes.append(f"{s.rung} is expected to use about {format_bytes(-(s.expected_saving_bytes or 0))} more "
                         "per GPU: listed after the rungs expected to free memory")
    return rest + spenders


def _tried_in(suggestion: Suggestion, profile: Profile, failed: list) -> str | None:
    """The failed run that already ran this rung's configuration. A run where a knob this rung
    changes did not arrive tried nothing of it: once the job reads the knob, the value is new."""
    if not suggestion.changes_profile:
        return None
    knobs = {**profile.knobs, **suggestion.new_knobs()}
    env = {**profile.env, **suggestion.env}
    for run_id, tried_knobs, tried_env, lost in failed:
        if tried_knobs != knobs or lost & set(suggestion.changes):
            continue
        if all(tried_env.get(k) == v for k, v in env.items() if k in suggestion.env or k in profile.env):
            return run_id
    return None


# -- upward tuning ----------------------------------------------------------------------------

WELL_UNDER = 0.75  # "a lot unused": the measured peak stayed below 75% of the target budget


def upward(profile: Profile, record: PastRun, facts: Any = None, *, estimate: Any = None,
           history: Iterable[PastRun] = ()) -> Suggestion | None:
    """After a successful run that left memory unused: a bigger micro batch, less accumulation,
    the global batch exact, when the measured peak predicts it still fits the target utilisation.
    """
    result = upward_result(profile, record, facts, estimate=estimate, history=history)
    return result.suggestions[0] if result.suggestions else None


def upward_result(profile: Profile, record: PastRun, facts: Any = None, *, estimate: Any = None,
                  history: Iterable[PastRun] = ()) -> LadderResult:
    history = tuple(history)
    notes: list[str] = []
    if not record.succeeded:
        return LadderResult(notes=["the run did not succeed: upward tuning needs a successful run"])
    knobs = profile.knobs
    peak = record.peak_bytes
    capacity = capacity_from(None, facts, profile, (*history, record))
    if peak is None or not capacity:
        return LadderResult(notes=["the run has no measured peak memory or GPU capacity: nothing to predict from"])
    budget = int(capacity * profile.target_utilization)
    if peak >= WELL_UNDER * budget:
        return LadderResult(notes=[
            f"the measured peak {format_bytes(peak)} is already close to the target "
            f"{format_bytes(budget)} ({profile.target_utilization:.0%} of {format_bytes(capacity)})"
        ])
    savings = Savings(profile, estimate=estimate, history=(*history, record), capacity_bytes=capacity)
    # The rung that buys speed back (checkpointing off) comes first: its step time is known to drop.
    speed, said, speed_cost = speed_back(knobs, record, savings, budget, history)
    notes += [said] if said else []
    if "micro_batch_size" not in knobs:
        return LadderResult(suggestions=[speed] if speed else [],
                            notes=[*notes, "micro_batch_size is not declared in [train]: nothing to tune upward"])
    micro = int(knobs["micro_batch_size"])
    has_accum = "gradient_accumulation_steps" in knobs
    accum = int(knobs.get("gradient_accumulation_steps") or 1)
    if not has_accum or accum <= 1:
        return LadderResult(suggestions=[speed] if speed else [], notes=[*notes,
            "gradient accumulation is already 1 (or not declared): a bigger micro batch would change the global batch"
        ])
    per_sample = savings.per_sample_measured()
    failed = _failed_configs(history)
    best = None
    for factor in range(2, accum + 1):
        if accum % factor:
            continue
        new_micro, new_accum = micro * factor, accum // factor
        extra = None
        if per_sample is not None:
            extra = per_sample * (new_micro - micro)
            basis = "the measured bytes per sample"
        else:
            predicted = savings.predicted_peak({"micro_batch_size": new_micro, "gradient_accumulation_steps": new_accum})
            if predicted is not None and savings.current_peak is not None:
                extra = max(predicted - savings.current_peak, 0)
                basis = "the estimate's growth"
        if extra is None:
            # Upper bound with no model: as if all of the measured peak grew with the micro batch.
            extra = peak * (factor - 1)
            basis = "a worst case (all memory grows with the batch)"
        predicted_peak = peak + extra
        if predicted_peak > budget:
            break
        if any(k == {**knobs, "micro_batch_size": new_micro, "gradient_accumulation_steps": new_accum} for _, k, _, _ in failed):
            notes.append(f"micro_batch_size {new_micro} already ran out of memory in an earlier run")
            break
        best = (new_micro, new_accum, predicted_peak, extra, basis)
    if best is None:
        notes.append("no bigger micro batch is predicted to fit under the target with the global batch exact")
        return LadderResult(suggestions=[speed] if speed else [], notes=notes)
    new_micro, new_accum, predicted_peak, extra, basis = best
    world = profile.world_size
    why = (
        f"the run peaked at {format_bytes(peak)} of {format_bytes(capacity)}; micro_batch_size {micro} → "
        f"{new_micro} with gradient_accumulation_steps {accum} → {new_accum} keeps the global batch at "
        f"{micro * accum * world} and is predicted to peak at {format_bytes(predicted_peak)} "
        f"(target {format_bytes(budget)}, from {basis}); fewer, larger steps run faster"
    )
    changes = {"micro_batch_size": [micro, new_micro], "gradient_accumulation_steps": [accum, new_accum]}
    faster = measured(changes, (*history, record))  # tune's trials at both micro batches, say
    suggestion = Suggestion("raise-micro-batch", changes, {}, False, -int(extra),
                            why + (f" ({faster.text()})" if faster else ""))
    if speed is None:
        return LadderResult(suggestions=[suggestion], notes=notes)
    # The one known to buy back more step time first; checkpointing's when only its figure is known.
    first = faster is not None and speed_cost is not None and faster.change < speed_cost.change
    return LadderResult(suggestions=[suggestion, speed] if first else [speed, suggestion], notes=notes)

