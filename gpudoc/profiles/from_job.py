"""A profile for a job that has none: its knobs, places and world read from its own command line.

`gpudoc run` with no profile, and `gpudoc fix` on such a run, describe the job by what it says
(``gpudoc.job.knobs``); the ladder then changes values and the planner writes each change to the
flag, override or config key it was read from. Nothing is written to a ``gpudoc.toml`` unless the
user asks (`gpudoc profile new NAME --from-run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoc.profiles.model import Profile

if TYPE_CHECKING:
    from gpudoc.runs.record import RunRecord

JOB_PROFILE_NAME = "(command)"


def job_profile(command: Sequence[str], cwd: Path) -> Profile:
    """The job as its command line and the config files it names describe it."""
    from gpudoc.job.knobs import read_job

    reading = read_job(command, cwd)
    return Profile(name=JOB_PROFILE_NAME, train=reading.values, launch=dict(reading.launch), job=reading)


def recorded_job_profile(record: RunRecord) -> Profile | None:
    """The job profile a run was launched with: its command read again from the run's directory,
    with the knob values the run really had (a relaunch may have changed some). None when the run
    had a profile file."""
    if (record.profile or {}).get("source") != "command" or not record.command:
        return None
    profile = job_profile(record.command, Path(record.cwd or "."))
    return replace(profile, train={**profile.train, **record.knobs})
