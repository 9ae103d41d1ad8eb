"""World size, process count, job id and node rank: from the launcher and the engine, never the script."""

from __future__ import annotations

import pytest

from gpudoc.bind.plan import plan_bindings
from gpudoc.errors import ProfileError
from gpudoc.job import is_multi_process, job_identity, node_rank, parse_command, process_count, world
from gpudoc.profiles.model import Profile

# The script has flags named like the launcher's: every reader must see torchrun's, not these.
MIXED = ["torchrun", "--nproc_per_node=2", "-m", "mypkg.train", "--nnodes", "3", "--rdzv-id", "x"]


@pytest.mark.parametrize("argv", [
    MIXED,
    ["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "mypkg.train", "--nnodes", "3",
     "--rdzv-id", "x"],
    ["env", "OMP_NUM_THREADS=4", *MIXED],
])
def test_the_scripts_own_flags_never_count(argv):
    job = parse_command(argv)
    assert world(job).nproc_per_node == 2 and world(job).nnodes == 1 and world(job).world_size == 2
    assert process_count(job) == 2 and is_multi_process(job)
    identity = job_identity(job, {})
    assert identity.job_id is None and identity.node_rank is None


def test_the_bindings_read_the_same_world_size(tmp_path):
    # [launch] agrees with torchrun (2 per node, 1 node): no contradiction is reported, and the
    # global batch is computed over 2 processes, not the script's 3 nodes.
    profile = Profile(name="p", path=tmp_path / "gpudoc.toml", launch={"nproc_per_node": 2, "nnodes": 1},
                      train={"micro_batch_size": 4, "gradient_accumulation_steps": 2})
    plan = plan_bindings(profile, MIXED, cwd=tmp_path)
    assert plan.conflicts == []
    wrong = Profile(name="p", path=tmp_path / "gpudoc.toml", launch={"nproc_per_node": 2, "nnodes": 3},
                    train={"micro_batch_size": 4})
    with pytest.raises(ProfileError, match=r"the command runs on 1 node\(s\) \(torchrun\) but the profile's "
                                           r"\[launch\] nnodes = 3"):
        plan_bindings(wrong, MIXED, cwd=tmp_path)


@pytest.mark.parametrize(("argv", "nproc", "nnodes", "count"), [
    (["torchrun", "--nproc_per_node=4", "--nnodes", "2", "t.py"], 4, 2, 8),
    (["torchrun", "--nproc_per_node=gpu", "t.py"], None, None, None),
    (["torchrun", "--nnodes=1:4", "--nproc_per_node=2", "t.py"], 2, None, 8),  # elastic: at most 8
    (["accelerate", "launch", "--num_processes", "8", "--num_machines", "2", "t.py"], 4, 2, 8),
    (["deepspeed", "--num_gpus", "2", "--num_nodes", "2", "t.py"], 2, 2, 4),
    (["deepspeed", "--num_gpus", "2", "t.py"], 2, 1, 2),
    (["srun", "-N", "2", "torchrun", "--nproc_per_node=4", "t.py"], 4, 2, 8),
    (["srun", "-N2", "--ntasks-per-node=4", "python", "t.py"], 4, 2, 8),
    (["srun", "--ntasks=8", "--nodes=2", "python", "t.py"], 4, 2, 8),
    (["mpirun", "-np", "4", "python", "t.py"], 4, 1, 4),
    (["python", "t.py", "--nnodes", "4"], None, None, None),
])
def test_world_from_each_launcher(argv, nproc, nnodes, count):
    job = parse_command(argv)
    assert (world(job).nproc_per_node, world(job).nnodes) == (nproc, nnodes)
    assert process_count(job) == count


def test_multi_process_when_the_count_is_unknown_or_from_the_profile():
    assert is_multi_process(parse_command(["torchrun", "--nproc_per_node=gpu", "t.py"]))
    assert not is_multi_process(parse_command(["torchrun", "--nproc_per_node=1", "t.py"]))
    assert not is_multi_process(parse_command(["python", "t.py"]))
    assert is_multi_process(parse_command(["python", "t.py"]), Profile(name="p", launch={"nproc_per_node": 4}))


def test_job_identity_from_the_engine():
    assert job_identity(parse_command(["python", "t.py"]), {}).job_id is None
    slurm = job_identity(parse_command(["torchrun", "t.py"]),
                         {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1"})
    assert (slurm.job_id, slurm.source, slurm.node_rank) == ("slurm-4242.0", "slurm", 1)
    rdzv = job_identity(parse_command(["torchrun", "--rdzv-id=exp7", "--nnodes=2", "t.py"]), {})
    assert (rdzv.job_id, rdzv.source) == ("rdzv-exp7", "rdzv-id")
    assert job_identity(parse_command(["torchrun", "--rdzv_id", "none", "t.py"]), {}).job_id is None
    elastic = job_identity(parse_command(["python", "t.py"]), {"TORCHELASTIC_RUN_ID": "exp7"})
    assert elastic.job_id == "rdzv-exp7"  # the same job as the torchrun that passed --rdzv-id=exp7


@pytest.mark.parametrize(("argv", "environ", "expected"), [
    (["torchrun", "--nnodes=2", "t.py"], {"SLURM_JOB_ID": "9", "SLURM_NODEID": "3"}, 3),
    (["torchrun", "--nnodes=2", "t.py"], {"GROUP_RANK": "1"}, 1),
    (["torchrun", "--nnodes=2", "--node-rank=2", "--master-addr=h", "t.py"], {}, 2),
    (["torchrun", "--nnodes=2", "--node_rank", "1", "t.py", "--node_rank", "7"], {}, 1),
    # c10d hands out group ranks by arrival and ignores --node-rank: it says nothing.
    (["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--node-rank=1", "t.py"], {}, None),
    (["python", "train.py", "--node-rank", "1"], {}, None),  # the script's own flag
    (["python", "train.py"], {"NODE_RANK": "4"}, 4),
    (["python", "train.py"], {"SLURM_NODEID": "x"}, None),
])
def test_node_rank_from_the_engine(argv, environ, expected):
    assert node_rank(parse_command(argv), environ) == expected


def test_visible_selection_reads_indices_and_uuids():
    from gpudoc.job.identity import visible_selection

    assert visible_selection({}) == (None, None)
    assert visible_selection({"CUDA_VISIBLE_DEVICES": "0,2"}) == ({0, 2}, None)
    assert visible_selection({"CUDA_VISIBLE_DEVICES": "GPU-abc,1"}) == ({1}, {"GPU-abc"})
    assert visible_selection({"CUDA_VISIBLE_DEVICES": "1,foo,2"}) == ({1}, None)  # CUDA stops at "foo"


def test_torchrun_one_process_per_visible_gpu_counts_what_the_jobs_environment_shows():
    from gpudoc.job.identity import World

    command = parse_command(["torchrun", "--nproc_per_node=gpu", "--nnodes=2", "train.py"])
    assert world(command, {"CUDA_VISIBLE_DEVICES": "0,1,2"}) == World(3, 2)
    # No CUDA_VISIBLE_DEVICES: the machine's GPUs decide, not known here.
    assert world(command, {}) == world(command) == World(None, 2)
    assert world(parse_command(["torchrun", "--nproc_per_node=auto", "t.py"]), {"CUDA_VISIBLE_DEVICES": "0"}) == \
        World(None, None)  # auto is the CPUs on a machine without CUDA


@pytest.mark.parametrize(("argv", "environ", "nproc", "nnodes"), [
    # Inside an allocation srun takes the allocation's nodes and tasks (its input variables).
    (["srun", "torchrun", "--nproc_per_node=4", "t.py"], {"SLURM_NNODES": "2", "SLURM_NTASKS": "2"}, 4, 2),
    (["srun", "python", "t.py"], {"SLURM_NNODES": "2", "SLURM_NTASKS": "8"}, 4, 2),
    (["srun", "--ntasks-per-node=4", "python", "t.py"], {"SLURM_NNODES": "3", "SLURM_NTASKS": "12"}, 4, 3),
    # Each option it gives wins over its variable; the others still come from the allocation.
    (["srun", "-N1", "python", "t.py"], {"SLURM_NNODES": "2", "SLURM_NTASKS": "8"}, 8, 1),
    (["srun", "-n", "2", "python", "t.py"], {"SLURM_NNODES": "2", "SLURM_NTASKS": "8"}, 1, 2),
    (["srun", "python", "t.py"], {}, None, None),
])
def test_srun_without_counts_takes_the_allocations(argv, environ, nproc, nnodes):
    got = world(parse_command(argv), environ)
    assert (got.nproc_per_node, got.nnodes) == (nproc, nnodes)
