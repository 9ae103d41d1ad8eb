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


def job_profile(command: Sequence[str], cwd: Path, environ: Mapping[str, str] | None = None) -> Profile:
    """The job as its command line and the config files it names describe it, with the model it
    names (its config.json, found locally) for the estimate."""
    from gpudoc.errors import ProfileError
    from gpudoc.estimate.model_source import with_job_model
    from gpudoc.job.knobs import read_job

    reading = read_job(command, cwd)
    profile = Profile(name=JOB_PROFILE_NAME, train=reading.values, launch=dict(reading.launch), job=reading)
    try:
        profile, found = with_job_model(profile, command, cwd, environ, config_data=reading.config_data)
        if found:
            reading.notes.append(found)  # which config.json the estimate reads
    except ProfileError as exc:  # a model not cached here: no estimate, but the job runs as it is
        reading.notes.append(str(exc))
    return profile


def describe(profile: Profile) -> list[str]:
    """What was read, for the terminal before launch: one line of knobs and places, then notes."""
    if profile.job is None:
        return []
    lines = []
    if profile.train:
        from gpudoc.bind.values import format_value

        places = profile.job.places
        knobs = ", ".join(f"{knob} = {format_value(value)} ({places.get(knob, 'default')})"
                          for knob, value in profile.train.items())
        lines.append(f"read from the command ({profile.job.framework}): {knobs}")
    return lines + [f"note: {note}" for note in profile.job.notes]


def recorded_job_profile(record: RunRecord, environ: Mapping[str, str] | None = None) -> Profile | None:
    """The job profile a run was launched with: its command read again from the run's directory,
    with the knob values the run really had (a relaunch may have changed some). None when the run
    had a profile file."""
    if (record.profile or {}).get("source") != "command" or not record.command:
        return None
    profile = job_profile(record.command, Path(record.cwd or "."), environ)
    return replace(profile, train={**profile.train, **record.knobs})
