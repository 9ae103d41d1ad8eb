"""The allocator vocabulary: names, which one a torch reads, its settings as torch parses them."""

from __future__ import annotations

import pytest

from gpudoc import allocator


def test_the_name_a_torch_reads():
    assert allocator.name_for((2, 13, 0)) == allocator.NEW_NAME == "PYTORCH_ALLOC_CONF"
    assert allocator.name_for((2, 9)) == "PYTORCH_ALLOC_CONF"
    assert allocator.name_for((2, 8, 1)) == allocator.CUDA_NAME == "PYTORCH_CUDA_ALLOC_CONF"
    assert allocator.name_for(None) == "PYTORCH_CUDA_ALLOC_CONF"  # every CUDA release reads it
    assert allocator.HIP_NAME in allocator.NAMES and allocator.HIP_NAME not in allocator.CUDA_NAMES


@pytest.mark.parametrize(("conf", "on"), [
    ("expandable_segments:True", True),
    ("max_split_size_mb:128,expandable_segments:True", True),
    ("expandable_segments:true", False),  # torch rejects it: not on
    ("expandable_segments:True,expandable_segments:False", False),  # the last one wins
    ("roundup_power2_divisions:[256:1,>:4],expandable_segments:True", True),
    ("", False),
    (None, False),
])
def test_expandable_segments_as_torch_reads_them(conf, on):
    assert allocator.is_expandable(conf) is on


def test_turning_expandable_segments_on_keeps_the_other_settings():
    assert allocator.with_expandable(None) == "expandable_segments:True"
    assert allocator.with_expandable("max_split_size_mb:128,expandable_segments:False") == \
        "max_split_size_mb:128,expandable_segments:True"
    assert allocator.with_expandable("bogus:1,max_split_size_mb:128", keep=frozenset({"max_split_size_mb"})) == \
        "max_split_size_mb:128,expandable_segments:True"
    assert allocator.is_expandable(allocator.with_expandable("backend:native"))


def test_settings_are_written_under_the_name_the_jobs_torch_reads():
    old = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "X": "1"}
    assert allocator.written_under(old, "PYTORCH_ALLOC_CONF") == {"PYTORCH_ALLOC_CONF": "expandable_segments:True",
                                                                  "X": "1"}
    both = {"PYTORCH_CUDA_ALLOC_CONF": "a", "PYTORCH_ALLOC_CONF": "b"}
    assert allocator.written_under(both, "PYTORCH_CUDA_ALLOC_CONF") == {"PYTORCH_CUDA_ALLOC_CONF": "a"}
    assert allocator.written_under(both, None) == both  # unknown torch: the profile's spelling stays


def test_the_effective_settings_prefer_the_name_torch_reads():
    env = {"PYTORCH_CUDA_ALLOC_CONF": "old", "PYTORCH_ALLOC_CONF": "new"}
    assert allocator.effective(env) == "new"
    assert allocator.effective(env, reads="PYTORCH_CUDA_ALLOC_CONF") == "old"
    assert allocator.effective({}) is None


def test_parse_keeps_bracketed_commas_and_names_what_torch_trips_on():
    options, problems = allocator.parse("roundup_power2_divisions:[256:1,512:2,>:4], expandable_segments:True,x")
    assert [o.key for o in options] == ["roundup_power2_divisions", "expandable_segments"]
    assert options[0].value == "[256:1,512:2,>:4]"
    assert any("contains spaces" in p for p in problems) and any("'x' has no ':value'" in p for p in problems)
