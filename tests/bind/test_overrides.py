"""``[bind] overrides``: a knob written as the job's own ``key=value``, its value spelled through a map
where the job spells it its own way, from a profile file as from a reading."""

from __future__ import annotations

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.errors import ProfileError
from gpudoc.profiles import load_profile

PROFILE = """[train]
micro_batch_size = 4
precision = "bf16"

[bind]
env = false
overrides = {micro_batch_size = "data.batch_size", precision = {key = "+trainer.precision", map = {bf16 = "bf16-mixed", fp32 = "32-true"}}}
"""


def test_a_mapped_override_from_a_profile_writes_the_jobs_spelling(tmp_path):
    (tmp_path / "p.toml").write_text(PROFILE)
    command = ["python", "train.py", "data.batch_size=8", "+trainer.precision=32-true"]
    plan = plan_bindings(load_profile("p.toml", tmp_path), command, cwd=tmp_path)
    assert plan.argv == ["python", "train.py", "data.batch_size=4", "+trainer.precision=bf16-mixed"]
    # A value the map does not spell is refused before anything runs, naming the binding.
    (tmp_path / "p.toml").write_text(PROFILE.replace('precision = "bf16"', 'precision = "fp16"'))
    with pytest.raises(ProfileError, match=r'\[bind.overrides\] precision: precision = "fp16" has no entry in the map'):
        plan_bindings(load_profile("p.toml", tmp_path), command, cwd=tmp_path)
