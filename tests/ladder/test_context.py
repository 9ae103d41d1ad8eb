"""What the rungs are weighed with (``gpudoc.ladder.context``): the notes when nothing weighs them."""

from __future__ import annotations

from gpudoc.errors import ProfileError
from gpudoc.job.knobs import JobReading
from gpudoc.ladder.context import Savings
from gpudoc.profiles.model import Profile


def _no_model(profile, **_):
    raise ProfileError("[model] hidden is missing")


def test_with_no_profile_a_missing_estimate_names_the_job_and_how_to_give_it_a_model():
    job = Profile(name="(command)", train={"micro_batch_size": 8}, job=JobReading())
    [note] = Savings(job, estimate=_no_model).notes
    assert note.startswith("no memory estimate for this job: its command names no model")
    assert "[model] hf_config" in note and "this profile" not in note


def test_with_a_profile_the_estimates_own_reason_is_given():
    written = Profile(name="p", train={"micro_batch_size": 8}, model={"hidden": 64})
    [note] = Savings(written, estimate=_no_model).notes
    assert note == "no memory estimate for this profile ([model] hidden is missing)"
