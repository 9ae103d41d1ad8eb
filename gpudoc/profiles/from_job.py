"""A profile for a job that has none: its knobs, places and world read from its own command line.

`gpudoc run` with no profile, and `gpudoc fix` on such a run, describe the job by what it says
(``gpudoc.job.knobs``); the ladder then changes values and the planner writes each change to the
flag, override or config key it was read from. Nothing is written to a ``gpudoc.toml`` unless the
user asks (`gpudoc profile new NAME --from-run`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoc.profiles.model import Profile

if TYPE_CHECKING:
    from gpudoc.runs.record import RunRecord

JOB_PROFILE_NAME = "(command)"


def with_command(profile: Profile, command: Sequence[str], cwd: Path,
                 environ: Mapping[str, str] | None = None) -> Profile:
    """The profile a job runs under, given its command: the one rule `run`, `run --dry-run` and
    `estimate` share.

    No profile: the job as its command describes it. A profile without ``[train]`` (every shipped
    GPU tier says only what the card is): the command's knobs, with the profile's environment, GPU,
    ladder and run settings. A profile with ``[train]`` describes the job itself. Either way a
    profile without ``[launch]`` takes world size and nodes from the launcher
    (``torchrun --nproc_per_node=2 --nnodes=2``), except a count its ``[gpu] count`` contradicts:
    the planner says that one."""
    if not command:
        return profile
    if profile.path is None:
        return job_profile(command, cwd, environ)
    if not profile.train:
        return job_profile(command, cwd, environ, base=profile)
    if profile.launch:
        return profile
    from gpudoc.frameworks import registry
    from gpudoc.job.argv import parse_command
    from gpudoc.job.identity import world

    job = parse_command(list(command))
    job_environ = job_environment(profile, command, environ)
    said = {**registry.launches(job, cwd, job_environ), **world(job, job_environ).as_launch()}
    return replace(profile, launch=_launcher_world(profile, said))


def job_environment(profile: Profile | None, command: Sequence[str],
                    environ: Mapping[str, str] | None) -> dict[str, str]:
    """The environment the job starts with: gpudoc's, the profile's ``[env]``, then what an ``env
    NAME=VALUE`` in front of its program sets (where a front-end's world comes from)."""
    import os

    from gpudoc.job.argv import env_assignments

    base = os.environ if environ is None else environ
    return {**base, **(profile.env if profile is not None else {}), **env_assignments(command)}


def _launcher_world(profile: Profile, said: Mapping[str, int]) -> dict[str, int]:
    """``[launch]`` from what the launcher fixes, for a profile without one; a process count its
    ``[gpu] count`` disagrees with stays out, so the planner's contradiction still names both."""
    if profile.launch:
        return dict(profile.launch)
    count = profile.gpu.get("count")
    return {k: v for k, v in said.items() if not (k == "nproc_per_node" and count and v != count)}


def job_profile(command: Sequence[str], cwd: Path, environ: Mapping[str, str] | None = None, *,
                base: Profile | None = None) -> Profile:
    """The job as its command line and the config files it names describe it, with the model it
    names (its config.json, found locally) for the estimate. ``base``: a profile without ``[train]``
    whose tables (environment, GPU, ladder, model) the job takes."""
    from gpudoc.errors import ProfileError
    from gpudoc.estimate.model_source import with_job_model
    from gpudoc.job.knobs import read_job

    reading = read_job(command, cwd, job_environment(base, command, environ))
    if base is None:
        profile = Profile(name=JOB_PROFILE_NAME, train=reading.values, launch=dict(reading.launch), job=reading)
    else:
        profile = replace(base, train=reading.values, launch=_launcher_world(base, reading.launch), job=reading)
    try:
        profile, found = with_job_model(profile, command, cwd, environ, config_data=reading.config_data)
        if found:
            reading.notes.append(found)  # which config.json the estimate reads
    except ProfileError as exc:  # a model not cached here: no estimate, but the job runs as it is
        reading.notes.append(str(exc))
    return profile


def describe(profile: Profile, *, observed: bool = True) -> list[str]:
    """What was read, for the terminal before launch: one line of knobs and places, then notes.
    ``observed``: whether the probe will watch this run (not with --no-probe or `python -I`), so
    the line never offers it when it cannot."""
    if profile.job is None:
        return []
    lines = []
    if profile.train:
        from gpudoc.configvalues import format_value

        places = profile.job.places
        knobs = ", ".join(f"{knob} = {format_value(value)} ({places.get(knob, 'default')})"
                          for knob, value in profile.train.items())
        unknown = [knob for knob in SIZING_KNOBS if knob not in profile.train]
        lines.append(f"read from the command ({profile.job.framework}): {knobs}"
                     + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    else:
        lines.append(NOTHING_READ + (NOTHING_READ_PROBE if observed else ""))
    return lines + [f"note: {note}" for note in profile.job.notes]


# The knobs the estimate sizes a step with: each one no source settled is named "unknown", not
# filled in with a framework's default the job may not use.
SIZING_KNOBS = ("micro_batch_size", "gradient_accumulation_steps", "max_seq_len", "precision",
                "gradient_checkpointing")

# Said once before launch (run and run --dry-run) when the reading found no knob at all: the
# estimate and the ladder then have nothing to work with, and silence would read as "all is known".
NOTHING_READ = ("read no knob from the command (no flag, override or config file gpudoc knows): its batch, "
                "accumulation, sequence length and precision are unknown, so no rung can change them; tell "
                "gpudoc with a profile ([train], and [bind] for where each knob lives: `gpudoc profile new NAME`)")
NOTHING_READ_PROBE = ", or let the probe observe this first run (`gpudoc runs show --json` then says what it ran with)"


def recorded_job_profile(record: RunRecord, environ: Mapping[str, str] | None = None) -> Profile | None:
    """The job profile a run was launched with: its command read again from the run's directory,
    with the knob values the run really had (a relaunch may have changed some). None when the run
    had a profile file with its own ``[train]``; a profile without one (a GPU tier) is loaded again
    and combined with the command, as `gpudoc run` did (``with_command``)."""
    ran = record.profile or {}
    if ran.get("source") != "command" or not record.command:
        return None
    cwd = Path(record.cwd or ".")
    profile = job_profile(record.command, cwd, environ)
    if ran.get("path"):
        from gpudoc.profiles.loader import load_profile_file

        path = Path(str(ran["path"]))
        path = path if path.is_absolute() else cwd / path
        if path.is_file():  # the environment the run had (a rung may have added to the tier's)
            profile = with_command(load_profile_file(path, cwd=cwd), record.command, cwd, environ)
            profile = replace(profile, env={str(k): str(v) for k, v in dict(ran.get("env") or profile.env).items()})
    return replace(profile, train={**profile.train, **record.knobs})
