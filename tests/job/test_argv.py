"""The one reader of the job's command line: where the launcher's options end and the script's begin."""

from __future__ import annotations

import pytest

from gpudoc.job.argv import option_key, parse_command


@pytest.mark.parametrize(("argv", "start", "launcher", "script"), [
    (["python", "-u", "-X", "dev", "train.py", "--a"], 5, None, "train.py"),
    (["python3.11", "-m", "my.module", "--a"], 3, None, "my.module"),
    (["torchrun", "--nproc_per_node", "4", "--standalone", "t.py", "--a"], 5, "torchrun", "t.py"),
    (["torchrun", "--nproc-per-node=4", "--rdzv-endpoint", "h:29500", "t.py"], 5, "torchrun", "t.py"),
    (["torchrun", "--nproc_per_node=2", "-m", "mypkg.train", "--nnodes", "3"], 4, "torchrun", "mypkg.train"),
    (["python", "-m", "torch.distributed.run", "--nnodes=1", "t.py", "--x"], 5, "torchrun", "t.py"),
    (["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "t.py"], 5, "torchrun", "t.py"),
    (["torchrun", "--no-python", "--nproc_per_node=2", "python", "-u", "t.py", "--x"], 6, "torchrun", "t.py"),
    (["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "t.py", "--x"], 6, "accelerate", "t.py"),
    (["python", "-m", "accelerate.commands.launch", "--num_processes", "2", "t.py"], 6, "accelerate", "t.py"),
    (["deepspeed", "--num_gpus", "2", "--no_local_rank", "t.py", "--x"], 5, "deepspeed", "t.py"),
    (["tune", "run", "--nproc_per_node", "2", "recipe", "--config", "c"], 5, "tune", "recipe"),
    (["env", "A=1", "-u", "B", "torchrun", "--standalone", "t.py", "--x"], 7, "torchrun", "t.py"),
    (["srun", "-N", "2", "--ntasks-per-node=1", "torchrun", "--nnodes", "2", "t.py"], 8, "torchrun", "t.py"),
    (["srun", "--exclusive", "-l", "python", "t.py", "--x"], 5, None, "t.py"),
    (["mpirun", "-np", "4", "--allow-run-as-root", "python", "t.py"], 6, None, "t.py"),
    (["uv", "run", "torchrun", "--nproc_per_node=2", "t.py", "--x"], 5, "torchrun", "t.py"),
    (["bash", "-x", "run.sh", "--x"], 3, None, "run.sh"),
    (["llamafactory-cli", "train", "cfg.yaml"], 1, None, "llamafactory-cli"),
    ([], 0, None, None),
])
def test_the_scripts_arguments_start_after_the_launchers_options(argv, start, launcher, script):
    job = parse_command(argv)
    assert (job.args_start, job.launcher, job.script) == (start, launcher, script)
    assert job.script_args == argv[start:]


def test_launcher_options_are_spelling_insensitive_and_never_the_scripts():
    job = parse_command(["torchrun", "--nproc-per-node=2", "--rdzv_id", "a", "t.py", "--rdzv_id", "b"])
    assert job.options.get("--nproc_per_node") == "2" and job.options.get("--rdzv-id") == "a"
    assert option_key("--nproc-per-node") == option_key("--nproc_per_node") == "nproc_per_node"
    assert not parse_command(["python", "t.py", "--nnodes", "4"]).options.has("--nnodes")


def test_the_program_that_runs_the_job_is_found_behind_env_and_wrappers():
    assert parse_command(["env", "A=1", "python3", "t.py"]).program == "python3"
    assert parse_command(["srun", "-N2", "torchrun", "t.py"]).program == "torchrun"
    job = parse_command(["srun", "-N2", "--ntasks-per-node=4", "python", "t.py"])
    assert job.wrapper == "srun" and job.wrapper_options.get("-N") == "2"


def test_the_variables_an_env_in_front_of_the_program_sets():
    from gpudoc.job.argv import env_assignments

    argv = ["srun", "-N", "2", "env", "-u", "NNODES", "FORCE_TORCHRUN=1", "NNODES=2", "llamafactory-cli", "train",
            "cfg.yaml", "A=b"]
    assert env_assignments(argv) == {"FORCE_TORCHRUN": "1", "NNODES": "2"}  # the script's key=value is its own
    assert env_assignments(["torchrun", "train.py", "X=1"]) == {}


def test_a_front_end_that_starts_its_own_launcher_is_the_program_not_the_launcher_it_names():
    # axolotl's `--launcher torchrun -- ARGS`: torchrun is an option's value, not the program.
    job = parse_command(["srun", "-N2", "axolotl", "train", "cfg.yml", "--launcher", "torchrun", "--",
                         "--nproc_per_node", "4"])
    assert (job.launcher, job.script, job.wrapper) == (None, "axolotl", "srun")
    assert job.script_args == ["train", "cfg.yml", "--launcher", "torchrun", "--", "--nproc_per_node", "4"]
    # uv run / conda run in front still find the launcher, or the front-end, behind them.
    assert parse_command(["uv", "run", "torchrun", "--nproc_per_node", "2", "t.py"]).launcher == "torchrun"
    job = parse_command(["conda", "run", "-n", "trl", "trl", "sft", "--config", "c.yaml"])
    assert (job.script, job.script_args) == ("trl", ["sft", "--config", "c.yaml"])
