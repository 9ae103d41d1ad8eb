"""`gpudoc tune`: short trials of the real command to find the largest micro batch that fits, the
global batch kept exact.

Flow: the job as `gpudoc run` reads it (``with_command``) -> its global batch, world size, the
estimate's largest micro batch (the first guess) and the card's capacity -> how each trial stops
(the framework's own step limit, else the probe after K optimizer steps) -> the search
(``gpudoc.commands.tune_search``), each trial launched as `gpudoc run` launches (``launch_once``), a
record of its own marked ``trial_of``, in a temporary working and output directory -> ``TuneResult``
-> ``gpudoc.render``; with ``--apply`` the answer is written by the one relaunch owner, as
`fix --apply` writes a rung.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoc.commands.run_attempt import refusing
from gpudoc.commands.tune_search import candidates, inexact, launch_bound, search
from gpudoc.errors import ExitStatus, LaunchError, UsageError
from gpudoc.output import Console
from gpudoc.results.tune import FAILED, FITS, OOM, Search, Trial
from gpudoc.units import GIB

if TYPE_CHECKING:
    from gpudoc.frameworks.base import Framework
    from gpudoc.profiles.model import Profile
    from gpudoc.runs.record import RunRecord
    from gpudoc.workspace import Workspace

DEFAULT_STEPS = 3
RUNG = "tune-micro-batch"


@dataclass(frozen=True)
class Stop:
    """How a trial stops after K optimizer steps: ``framework``, whose adapter's own step limit does it
    (``gpudoc.frameworks``), or None: the probe (GPUDOC_PROBE_STOP_AFTER). And the switches, each with
    the value that turns saving, evaluation, hub pushes or a tracker off, that keep the trial to
    itself: ``always`` the framework's parser declares whatever the script; the ``declared`` ones only
    where the command already gives them (the job accepts them) or the script's own argparse declares
    them. ``output``: the output directory's switch, the first one the framework's own."""

    framework: str | None
    output: tuple[str, ...] = ()
    always: tuple[tuple[str, str], ...] = ()
    declared: tuple[tuple[str, str], ...] = ()
    own_output: bool = False  # the framework's parser declares ``output[0]``: given even when not asked

    @classmethod
    def of(cls, adapter: Framework) -> Stop:
        """A trial stopped by ``adapter``'s own step limit, with the switches it knows."""
        own = adapter.trial_switches
        if own is None:
            return replace(PROBE_STOP, framework=adapter.name)
        return cls(adapter.name, (own.output,), own.off, own.off_if_declared, own_output=True)


PROBE_STOP = Stop(None, ("--output_dir", "--output-dir", "--out_dir"),
                  declared=(("--save_strategy", "no"), ("--report_to", "none"), ("--push_to_hub", "False"),
                            ("--wandb", "False")))


@dataclass(frozen=True)
class TuneOptions:
    command: list[str]
    profile: str | None = None
    steps: int = DEFAULT_STEPS
    low: int = 1
    high: int | None = None  # default: twice the estimate's largest micro batch (else the job's own)
    apply: bool = False
    json: bool = False


def tune(options: TuneOptions, ws: Workspace) -> int:
    """The whole of `gpudoc tune`; 0 when a micro batch fits, 1 when none does, 125 when refused."""
    from gpudoc.profiles.from_job import with_command
    from gpudoc.results.tune import TuneResult
    from gpudoc.runs.store import new_run_id

    if not options.command:
        raise LaunchError("nothing to tune: gpudoc tune [SWITCHES] -- COMMAND [ARGS...]")
    if options.steps < 1 or options.low < 1 or (options.high is not None and options.high < options.low):
        raise UsageError(f"gpudoc tune: --steps {options.steps}, --min {options.low}, --max {options.high}: expected "
                         "whole numbers >= 1 with --min <= --max")
    profile = refusing(lambda: with_command(ws.load_profile(options.profile), options.command, ws.cwd, ws.environ))
    micro, accum, world = _batch(profile)
    global_batch = micro * accum * world
    start, capacity, estimated = _first_guess(profile, micro, ws)
    high = options.high if options.high is not None else 2 * start
    stop = _stop_of(profile, options.command, ws.cwd)
    options_ = candidates(global_batch, world, options.low, high)
    if not options_:
        raise LaunchError(f"no micro batch from --min {options.low} to --max {high} keeps the global batch of "
                          f"{global_batch} ({micro} x {accum} x {world} processes) exact")
    copies = _edited_files(profile, options.command, ws)
    tune_id = new_run_id()
    how = f"{stop.framework}'s step limit" if stop.framework else "the probe"
    ws.console.error(f"gpudoc tune {tune_id}: global batch {global_batch} ({micro} x {accum} x {world}); "
                     f"micro batches {options_[0]}..{options_[-1]} from {start}"
                     f" ({'the estimate' if estimated else 'the job'}); {options.steps} steps a trial, "
                     f"stopped by {how}")
    records: dict[str, RunRecord] = {}

    def run(m: int) -> Trial:
        trial, record = _trial(options, profile, stop, tune_id, m, global_batch // world // m, copies, ws)
        if record is not None:
            records[record.id] = record
        ws.console.error(f"gpudoc tune: micro batch {m} x accumulation {trial.gradient_accumulation_steps}: "
                         f"{trial.outcome}" + (f" (peak {trial.peak_bytes / GIB:.2f} GiB)" if trial.peak_bytes else "")
                         + (f", run {trial.run_id}" if trial.run_id else ""))
        return trial

    found = search(options_, start, run, capacity=capacity, bound=launch_bound(options.low, high),
                   exact=lambda m: inexact(m, global_batch, world))
    capacity = capacity or _measured_capacity(found, records)
    applied, notes = None, _notes(found, records)
    if options.apply and found.best is not None and found.failed is None:
        applied, said = apply_answer(found.best, micro, accum, profile, options.command, records, ws)
        notes += said
    status = ExitStatus.NEGATIVE if found.best is None or found.failed is not None else ExitStatus.OK
    from gpudoc.render.show import show

    return show(TuneResult(tune_id=tune_id, global_batch_size=global_batch, world_size=world,
                           before=(micro, accum), search=found, capacity_bytes=capacity, applied=applied,
                           notes=tuple(notes), exit_code=int(status)), ws.console, as_json=options.json)


def _batch(profile: Profile) -> tuple[int, int, int]:
    """The job's micro batch, accumulation and world size; refused (125) when the micro batch is unknown."""
    train = profile.train
    micro, accum = train.get("micro_batch_size"), train.get("gradient_accumulation_steps") or 1
    if not isinstance(micro, int) or isinstance(micro, bool) or not isinstance(accum, int) or micro < 1:
        where = f"{profile.path}: [train] micro_batch_size" if profile.path else "the command"
        raise LaunchError(f"the job's micro batch is unknown ({where} does not say it): tune changes it where "
                          "it lives, so name it (a profile's [train] and [bind], `gpudoc profile new NAME`)")
    return micro, accum, profile.world_size


def _first_guess(profile: Profile, micro: int, ws: Workspace) -> tuple[int, int | None, bool]:
    """(the first micro batch to try, the card's capacity in bytes, whether the estimate gave it):
    the estimate's largest micro batch (simulated with ``[estimate] simulate = true``) where the
    profile describes the model and a card is known, else the job's own."""
    try:
        facts = ws.gather(deep=False)
    except Exception:  # no driver, no NVML: the trials still say what fits
        facts = None
    totals = [g.memory_total_bytes for g in (facts.gpus if facts is not None else ()) if g.memory_total_bytes]
    capacity = min(totals) if totals else None
    if capacity is None and profile.gpu.get("memory_gib"):
        capacity = int(float(profile.gpu["memory_gib"]) * GIB)
    estimate = refusing(lambda: ws.estimate(profile, facts)) if profile.model else None
    if estimate is not None and estimate.max_micro_batch_size:
        return int(estimate.max_micro_batch_size), capacity, True
    return micro, capacity, False


def _stop_of(profile: Profile, command: list[str], cwd: Path) -> Stop:
    from gpudoc.frameworks import registry
    from gpudoc.runs.reach import unreachable

    adapter = registry.get(profile.job.framework if profile.job is not None else _framework(command, cwd))
    if adapter is not None and adapter.step_limit([], 1) is not None:
        return Stop.of(adapter)
    if profile.run.get("probe", True) is False or unreachable(command):
        raise LaunchError("the job has no step limit gpudoc knows and the probe cannot watch it "
                          f"({unreachable(command) or '[run] probe = false'}): no trial could stop after its steps")
    return PROBE_STOP


def _framework(command: list[str], cwd: Path) -> str | None:
    from gpudoc.job.knobs import read_job

    try:
        return read_job(command, cwd).framework
    except Exception:  # a profile's job whose command gpudoc cannot read: the probe stops it
        return None


def _edited_files(profile: Profile, command: list[str], ws: Workspace) -> tuple[str, ...]:
    """The project's files a trial edits, relative to its working directory: the config files that
    hold the micro batch (and the accumulation beside it). Each trial edits a copy of its own; a
    file outside the project is refused (125): tune never writes the user's files."""
    from gpudoc.commands.run import resolve_command

    moved = profile.with_train({"micro_batch_size": int(profile.train["micro_batch_size"]) + 1})
    resolved, _ = refusing(lambda: resolve_command(moved, command, cwd=ws.cwd, environ=ws.environ))
    project, found = ws.cwd.resolve(), []
    for edit in resolved.file_edits:
        path = (ws.cwd / edit.path).resolve()
        if not path.is_relative_to(project) or ".gpudoc" in path.relative_to(project).parts:
            raise LaunchError(f"the micro batch lives in {edit.path}, outside the project {ws.cwd}: tune edits "
                              "only its own copies of the project's files, never the user's")
        found.append(str(path.relative_to(project)))
    return tuple(found)


def _copy_in(work: Path, relative: str) -> None:
    """``work/relative`` made a file of the trial's own (a copy) where the trial's working directory
    holds links to the project's: each linked directory on the way becomes a real one of links, so
    an edit of the copy never reaches the user's file."""
    here = work
    parts = Path(relative).parts
    for name in parts[:-1]:
        here = here / name
        if here.is_symlink():
            target = here.resolve()
            here.unlink()
            here.mkdir()
            for entry in os.scandir(target):
                (here / entry.name).symlink_to(entry.path)
    leaf = here / parts[-1]
    source = leaf.resolve()
    leaf.unlink()
    shutil.copy2(source, leaf)


def trial_command(command: list[str], stop: Stop, steps: int, output: str, declared: set[str]) -> list[str]:
    """The user's command with the framework's step limit and the switches that keep a trial to
    itself, each only where the job takes it."""
    from gpudoc.edits.argv import ArgEdits
    from gpudoc.frameworks import registry
    from gpudoc.job.argv import parse_command

    job = parse_command(command)
    args = list(command[job.args_start:])
    adapter = registry.get(stop.framework)
    limited = adapter.step_limit(args, steps) if adapter is not None else None
    edits = ArgEdits(limited if limited is not None else args)
    given = {token.split("=", 1)[0] for token in edits.tokens if token.startswith("-")} | declared
    for name, value in (*stop.always, *((n, v) for n, v in stop.declared if n in given)):
        edits.set_value((name,), value, append_form="eq")
    own = stop.output[0] if stop.own_output else None
    for name in (n for n in stop.output if n in given or n == own):
        edits.set_value((name,), output, append_form="eq")
        break
    return [*command[:job.args_start], *edits.result()]


def _declared(command: list[str], cwd: Path) -> set[str]:
    """The flags the script's own argparse declares (read from its source; never run)."""
    from gpudoc.job.argv import parse_command
    from gpudoc.job.recognise import argparse_defaults

    try:
        return set(argparse_defaults(parse_command(command), cwd))
    except Exception:  # an unreadable script: only the command's own flags count as declared
        return set()


def _trial(options: TuneOptions, profile: Profile, stop: Stop, tune_id: str, micro: int, accum: int,
           copies: tuple[str, ...], ws: Workspace) -> tuple[Trial, RunRecord | None]:
    """One trial: launched as `gpudoc run` launches, in a working directory of its own where the
    user's files are links (read as they are; what the job writes lands beside them, and goes),
    except ``copies``: the config files the trial edits, copies of its own."""
    from gpudoc.commands.run import launch_once
    from gpudoc.commands.run_options import RunOptions

    with tempfile.TemporaryDirectory(prefix="gpudoc-tune-") as tmp:
        work, output = Path(tmp) / "work", Path(tmp) / "output"
        work.mkdir()
        for entry in os.scandir(ws.cwd):
            if entry.name != ".gpudoc":
                (work / entry.name).symlink_to(entry.path)
        for relative in copies:
            _copy_in(work, relative)
        command = trial_command(options.command, stop, options.steps, str(output), _declared(options.command, ws.cwd))
        # Python puts the script's real directory (through the link: the project's) on sys.path, so
        # the job's own modules would leave their bytecode caches in the project: none are written.
        environ = dict(ws.environ, PYTHONDONTWRITEBYTECODE="1",
                       **({} if stop.framework else {"GPUDOC_PROBE_STOP_AFTER": str(options.steps)}))
        # The job's output goes to stderr (stdout is tune's answer); each trial's own summary stays unsaid.
        console = Console(out=ws.console.err, err=io.StringIO(), colour=False)
        trial_ws = replace(ws.but(cwd=work, console=console), environ=environ)
        trial_ws.__dict__["store"] = ws.store
        trial_profile = profile.with_train({"micro_batch_size": micro, "gradient_accumulation_steps": accum})
        run_options = RunOptions(command=command, profile=options.profile, no_check=True, trial_of=tune_id)
        _, record = launch_once(run_options, trial_profile, trial_ws, parent=None)
    if record is None:
        return Trial(micro, accum, FAILED), None
    steps = record.steps or {}
    outcome = FITS if record.succeeded else OOM if record.oom_retryable or record.failed_oom else FAILED
    peak = steps.get("peak_reserved_bytes") or steps.get("peak_allocated_bytes") or record.peak_bytes
    return Trial(micro, accum, outcome, record.id, int(peak) if peak else None, steps.get("seconds_per_step")), record


def _measured_capacity(found: Search, records: dict[str, RunRecord]) -> int | None:
    """The card's capacity as the trials' GPU samples saw it (NVML), when nothing said it before."""
    totals = [t for trial in found.trials if trial.run_id in records
              for t in records[trial.run_id].gpu_totals.values()]
    return min(totals) if totals else None


def _notes(found: Search, records: dict[str, RunRecord]) -> list[str]:
    failed = found.failed
    if failed is None:
        return []
    record = records.get(failed.run_id or "")
    cause = record.cause if record is not None else "not launched"
    return [f"the trial at micro batch {failed.micro_batch_size} failed, not for memory ({cause}): the search "
            f"stopped there" + (f" (`gpudoc logs {failed.run_id}`)" if failed.run_id else "")]


def apply_answer(best: Trial, micro: int, accum: int, profile: Profile, command: list[str],
           records: dict[str, RunRecord], ws: Workspace) -> tuple[dict[str, Any] | None, list[str]]:
    """The answer written by the one relaunch owner, as `fix --apply` writes a rung: into the profile
    (its backup and `gpudoc restore` as for a rung), or for a job read from its command, the next
    command with its flags."""
    from gpudoc.commands.relaunch import apply_next, plan_next
    from gpudoc.diagnose.diagnosis import Diagnosis
    from gpudoc.ladder.model import LadderResult, Suggestion

    if (best.micro_batch_size, best.gradient_accumulation_steps) == (micro, accum):
        return None, [f"nothing written: the job already runs micro batch {micro} x accumulation {accum}"]
    changes = {"micro_batch_size": [micro, best.micro_batch_size],
               "gradient_accumulation_steps": [accum, best.gradient_accumulation_steps]}
    ladder = LadderResult(suggestions=[Suggestion(RUNG, changes, why="the largest micro batch the trials fit")])
    # The job as the user runs it (the trial ran a copy of its command, elsewhere): a command's
    # flags are planned on the user's own command line.
    anchor = (replace(records[str(best.run_id)], command=list(command), cwd=str(ws.cwd), run_switches=[])
              if profile.job else None)
    plan = plan_next(ladder, profile, anchor, ws.cwd)
    done = apply_next(plan, ladder, Diagnosis.ok(), profile, anchor, ws, since=None, rerun=False)
    return done.written, list(done.notes)
