"""The pure command builder: profile + bind plan -> argv, environment, edits."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudoc.allocator import written_under
from gpudoc.launch.command import resolve
from gpudoc.profiles.model import EMPTY, Profile


@dataclass
class Plan:
    argv: list
    env: dict
    file_edits: list = field(default_factory=list)
    conflicts: list = field(default_factory=list)
    notes: list = field(default_factory=list)


@dataclass
class Edit:
    path: str
    diff: str


def test_no_profile_changes_nothing():
    resolved = resolve(EMPTY, ["python", "train.py"])
    assert resolved.to_dict() == {"command": ["python", "train.py"], "env_set": {}, "file_edits": []}


def test_profile_env_then_plan_env_and_argv():
    profile = Profile(name="p", env={"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": 4})
    plan = Plan(argv=["python", "train.py", "--bs", "8"], env={"GPUDOC_MICRO_BATCH_SIZE": "8"},
                file_edits=[Edit("ds.json", "--- a\n+++ b\n")])
    doc = resolve(profile, ["python", "train.py", "--bs", "{micro_batch_size}"], plan=plan).to_dict()
    assert doc["command"] == ["python", "train.py", "--bs", "8"]
    assert doc["env_set"] == {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "4",
                              "GPUDOC_MICRO_BATCH_SIZE": "8"}
    assert doc["file_edits"] == [{"path": "ds.json", "diff": "--- a\n+++ b\n"}]


def test_allocator_variable_is_written_under_the_name_torch_reads():
    old = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert written_under(old, "PYTORCH_ALLOC_CONF") == {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    new = {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert written_under(new, "PYTORCH_CUDA_ALLOC_CONF") == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    both = {"PYTORCH_ALLOC_CONF": "a", "PYTORCH_CUDA_ALLOC_CONF": "b"}
    assert written_under(both, "PYTORCH_ALLOC_CONF") == {"PYTORCH_ALLOC_CONF": "a"}
    assert written_under(both, None) == both  # unknown torch: the profile's spelling stays


def test_child_env_layers_on_the_callers_environment():
    resolved = resolve(Profile(name="p", env={"A": "1"}), ["x"])
    assert resolved.child_env({"A": "0", "B": "2"}) == {"A": "1", "B": "2"}
