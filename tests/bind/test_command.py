"""Where the script's arguments start, and what the launcher says about process count."""

from __future__ import annotations

import pytest

from gpudoc.bind.command import command_world, split_command


@pytest.mark.parametrize("argv,start,launcher,script", [
    (["python", "-u", "-X", "dev", "train.py", "--a"], 5, None, "train.py"),
    (["python3.11", "-m", "my.module", "--a"], 3, None, "my.module"),
    (["torchrun", "--nproc_per_node", "4", "--standalone", "t.py", "--a"], 5, "torchrun", "t.py"),
    (["torchrun", "--nproc-per-node=4", "--rdzv-endpoint", "h:29500", "t.py"], 5, "torchrun", "t.py"),
    (["python", "-m", "torch.distributed.run", "--nnodes=1", "t.py", "--x"], 5, "torchrun", "t.py"),
    (["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "t.py", "--x"], 6, "accelerate", "t.py"),
    (["deepspeed", "--num_gpus", "2", "--no_local_rank", "t.py", "--x"], 5, "deepspeed", "t.py"),
    (["tune", "run", "--nproc_per_node", "2", "recipe", "--config", "c"], 5, "tune", "recipe"),
    (["env", "A=1", "-u", "B", "torchrun", "--standalone", "t.py", "--x"], 7, "torchrun", "t.py"),
    (["srun", "-N", "2", "--ntasks-per-node=1", "torchrun", "--nnodes", "2", "t.py"], 8, "torchrun", "t.py"),
    (["bash", "-x", "run.sh", "--x"], 3, None, "run.sh"),
    (["llamafactory-cli", "train", "cfg.yaml"], 1, None, "llamafactory-cli"),
])
def test_split(argv, start, launcher, script):
    parts = split_command(argv)
    assert (parts.args_start, parts.launcher, parts.script) == (start, launcher, script)


def test_command_world():
    assert command_world(split_command(["torchrun", "--nproc_per_node=4", "--nnodes", "2", "t.py"])) == \
        {"nproc_per_node": 4, "nnodes": 2, "world_size": 8}
    assert command_world(split_command(["torchrun", "--nproc_per_node=gpu", "t.py"]))["world_size"] is None
    assert command_world(split_command(["torchrun", "--nnodes=1:4", "--nproc_per_node=2", "t.py"]))["nnodes"] is None
    assert command_world(split_command(["accelerate", "launch", "--num_processes", "8", "--num_machines", "2",
                                        "t.py"])) == {"nproc_per_node": 4, "nnodes": 2, "world_size": 8}
    assert command_world(split_command(["deepspeed", "--num_gpus", "2", "t.py"]))["world_size"] == 2
    assert command_world(split_command(["python", "t.py"]))["world_size"] is None
