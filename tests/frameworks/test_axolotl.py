"""axolotl's CLI that starts its own launcher (``--launcher torchrun -- ARGS``), behind srun."""

from __future__ import annotations

import json
import shutil

from gpudoc.bind import plan_bindings
from gpudoc.job.knobs import read_job
from gpudoc.profiles import load_profile
from gpudoc.profiles.from_job import job_profile, with_command
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


HELDOUT = CONFIGS.parent / "heldout"


def test_options_after_the_config_replace_its_keys_and_are_changed_where_they_are(tmp_path):
    # axolotl's docs/cli.qmd: `axolotl train config.yml --learning-rate 1e-4 --micro-batch-size 2 --num-epochs 3`,
    # config.yml its stablelm-2 1.6b fft example (micro_batch_size 1, accumulation 1).
    shutil.copy(HELDOUT / "axolotl__examples__archived__stablelm-2__1.6b__fft.yml", tmp_path / "config.yml")
    command = ["axolotl", "train", "config.yml", "--learning-rate", "1e-4", "--micro-batch-size", "2",
               "--num-epochs", "3"]
    reading = read_job(command, tmp_path)
    assert reading.values["micro_batch_size"] == 2 and reading.places["micro_batch_size"] == "argv:--micro-batch-size"
    assert reading.values["gradient_accumulation_steps"] == 1  # still the file's
    # A smaller micro batch is written to the option axolotl reads last, the YAML left as it is.
    plan = plan_bindings(job_profile(command, tmp_path).with_train({"micro_batch_size": 1}).for_planning(), command,
                         cwd=tmp_path)
    assert plan.argv == [*command[:6], "1", *command[7:]] and plan.file_edits == []


def test_a_deepspeed_option_replaces_the_json_the_config_names(tmp_path):
    # docs/multi-gpu.qmd: `axolotl train config.yml --deepspeed deepspeed_configs/zero1.json`; the
    # stablelm example's own `deepspeed:` is empty, lora-1b's absent: ZeRO is the option's JSON.
    shutil.copy(HELDOUT / "axolotl__examples__llama-3__lora-1b.yml", tmp_path / "config.yml")
    (tmp_path / "deepspeed_configs").mkdir()
    shutil.copy(HELDOUT / "axolotl__deepspeed_configs__zero1.json", tmp_path / "deepspeed_configs" / "zero1.json")
    reading = read_job(["axolotl", "train", "config.yml", "--deepspeed", "deepspeed_configs/zero1.json"], tmp_path)
    assert reading.values["zero_stage"] == 1
    assert reading.places["zero_stage"].startswith("file:deepspeed_configs/zero1.json")
    # A switch it does not read is said, not guessed.
    reading = read_job(["axolotl", "train", "config.yml", "--gradient-checkpointing", "--micro_batch_size", "4"],
                       tmp_path)
    assert reading.values["micro_batch_size"] == 4 and "gradient_checkpointing" not in reading.values
    assert any("--gradient-checkpointing on the command line" in note for note in reading.notes)
