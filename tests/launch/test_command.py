"""The pure command builder: profile + bind plan -> argv, environment, edits."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudoc.launch.command import (
    is_multi_process, is_torchrun, job_identity, normalise_alloc_env, process_count, rendezvous_id, resolve,
)
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
    assert normalise_alloc_env(old, "PYTORCH_ALLOC_CONF") == {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    new = {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert normalise_alloc_env(new, "PYTORCH_CUDA_ALLOC_CONF") == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    both = {"PYTORCH_ALLOC_CONF": "a", "PYTORCH_CUDA_ALLOC_CONF": "b"}
    assert normalise_alloc_env(both, "PYTORCH_ALLOC_CONF") == {"PYTORCH_ALLOC_CONF": "a"}
    assert normalise_alloc_env(both, None) == both  # unknown torch: the profile's spelling stays


def test_child_env_layers_on_the_callers_environment():
    resolved = resolve(Profile(name="p", env={"A": "1"}), ["x"])
    assert resolved.child_env({"A": "0", "B": "2"}) == {"A": "1", "B": "2"}


def test_process_count_from_launcher_flags_only():
    assert process_count(["torchrun", "--nproc_per_node=4", "train.py"]) == 4
    assert process_count(["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "train.py"]) == 16
    assert process_count(["torchrun", "--nnodes=1:2", "--nproc_per_node=2", "t.py"]) == 4
    # The script's own --nnodes is not the launcher's.
    assert process_count(["python", "train.py", "--nnodes", "4"]) is None
    assert process_count(["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "t.py"]) == 2
    assert process_count(["accelerate", "launch", "--num_processes", "2", "t.py"]) == 2


def test_multi_process_detection():
    assert is_multi_process(["torchrun", "--nproc_per_node=2", "t.py"])
    assert not is_multi_process(["torchrun", "--nproc_per_node=1", "t.py"])
    assert is_multi_process(["torchrun", "--nproc_per_node=gpu", "t.py"])
    assert not is_multi_process(["python", "t.py"])
    assert is_multi_process(["python", "t.py"], Profile(name="p", launch={"nproc_per_node": 4}))
    assert is_torchrun(["python", "-m", "torch.distributed.run", "t.py"])


def test_job_identity_from_the_engine():
    assert job_identity(["python", "t.py"], {}).job_id is None
    slurm = job_identity(["torchrun", "t.py"], {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1"})
    assert (slurm.job_id, slurm.source, slurm.node_rank) == ("slurm-4242.0", "slurm", "1")
    rdzv = job_identity(["torchrun", "--rdzv-id=exp7", "--nnodes=2", "t.py"], {})
    assert (rdzv.job_id, rdzv.source) == ("rdzv-exp7", "rdzv-id")
    assert rendezvous_id(["torchrun", "--rdzv_id", "abc", "t.py", "--rdzv_id", "not-ours"]) == "abc"
    elastic = job_identity(["python", "t.py"], {"TORCHELASTIC_RUN_ID": "exp7"})
    assert elastic.job_id == "rdzv-exp7"  # the same job as the torchrun that passed --rdzv-id=exp7
