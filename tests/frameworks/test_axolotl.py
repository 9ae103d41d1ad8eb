"""axolotl's CLI that starts its own launcher (``--launcher torchrun -- ARGS``), behind srun."""

from __future__ import annotations

import json
import shutil

from gpudoc.profiles import load_profile
from gpudoc.profiles.from_job import with_command
from tests.conftest import CONFIGS, gpudoc_cli

FFT = CONFIGS / "axolotl__examples__llama-3__fft-8b.yaml"  # micro_batch_size 1, accumulation 8
SRUN = ["srun", "-N2", "axolotl", "train", "fft.yaml", "--launcher", "torchrun", "--", "--nproc_per_node", "4"]


def test_srun_axolotl_with_its_torchrun_is_read_as_axolotl_through_the_dry_run(tmp_path):
    shutil.copy(FFT, tmp_path / "fft.yaml")
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *SRUN, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    read = {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}
    assert read["micro_batch_size"] == (1, "file:fft.yaml")
    assert read["gradient_accumulation_steps"] == (8, "file:fft.yaml")
    assert "read from the command (axolotl)" in done.stderr
    assert "its CLI starts torchrun itself with the options after `--`: nproc_per_node = 4" in done.stderr


def test_the_world_is_the_launchers_it_starts_on_the_nodes_srun_gives(tmp_path):
    shutil.copy(FFT, tmp_path / "fft.yaml")
    tier = load_profile("gpu-24gb", tmp_path)
    profile = with_command(tier, SRUN, tmp_path, {})
    assert profile.launch == {"nproc_per_node": 4, "nnodes": 2} and profile.global_batch_size == 64
    # srun's one task per node starts one torchrun each: the workers are torchrun's, the nodes the allocation's.
    per_node = ["srun", "--ntasks-per-node=1", *SRUN[2:]]
    assert with_command(tier, per_node, tmp_path, {"SLURM_NNODES": "3"}).launch == {"nproc_per_node": 4, "nnodes": 3}
    # The default launcher is accelerate, its --num_processes the total.
    accel = ["axolotl", "train", "fft.yaml", "--", "--num_processes", "8", "--num_machines", "2"]
    assert with_command(tier, accel, tmp_path, {}).launch == {"nproc_per_node": 4, "nnodes": 2}
