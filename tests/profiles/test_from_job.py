"""A profile for a job that has none: what its command says, the model it names found in the local
Hugging Face cache, what the terminal is told, and the profile a recorded run is fixed with."""

from __future__ import annotations

from gpudoc.profiles.from_job import describe, job_profile, recorded_job_profile
from gpudoc.runs.record import RunRecord
from tests.estimate.hf_configs import CONFIGS
from tests.estimate.test_model_source import cache_model
from tests.job.scripts import write_hf_script

COMMAND = ["torchrun", "--nproc_per_node=2", "train.py", "--model_name_or_path", "meta-llama/Llama-3.2-1B",
           "--per_device_train_batch_size", "8", "--max_seq_length", "2048"]


def test_the_model_the_command_names_is_found_in_the_cache(tmp_path):
    hub = tmp_path / "hf" / "hub"
    config = cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    write_hf_script(tmp_path)
    profile = job_profile(COMMAND, tmp_path, {"HF_HOME": str(hub.parent)})
    assert profile.model["hf_config"] == str(config)
    assert profile.train["micro_batch_size"] == 8 and profile.train["max_seq_len"] == 2048
    assert profile.world_size == 2
    # Which config.json was read, said before launch and in the estimate's notes.
    assert profile.job is not None and [n for n in profile.job.notes if "script's own" not in n] == [
        f"[model] from the job's --model_name_or_path = meta-llama/Llama-3.2-1B: {config}"]


def test_a_model_not_in_the_cache_is_a_note_and_the_job_still_runs(tmp_path):
    write_hf_script(tmp_path)
    profile = job_profile(COMMAND, tmp_path, {"HF_HOME": str(tmp_path / "empty")})
    assert profile.model == {}
    assert profile.train["micro_batch_size"] == 8
    line, *notes = describe(profile)  # and one saying --max_seq_length is the script's own flag
    assert line.startswith("read from the command (hf-trainer): micro_batch_size = 8 "
                           "(argv:--per_device_train_batch_size)")
    [note] = [n for n in notes if "meta-llama/Llama-3.2-1B" in n]
    assert note.startswith("note: ")


def test_a_recorded_run_is_fixed_with_the_values_it_ran_with(tmp_path):
    ran = job_profile(COMMAND, tmp_path, {}).with_changes({"micro_batch_size": 4}, {})
    record = RunRecord(id="r1", command=COMMAND, cwd=str(tmp_path), profile=ran.to_dict())
    again = recorded_job_profile(record, {})
    assert again is not None and again.train["micro_batch_size"] == 4
    assert again.changed_knobs() == {"micro_batch_size": 4}  # the command still says 8
    profiled = RunRecord(id="r2", command=COMMAND, cwd=str(tmp_path), profile={"name": "p", "path": "p.toml"})
    assert recorded_job_profile(profiled, {}) is None


def test_the_model_named_in_a_hydra_config_is_found(tmp_path):
    hub = tmp_path / "hf" / "hub"
    config = cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(
        "model:\n  name_or_path: meta-llama/Llama-3.2-1B\ndata:\n  batch_size: 4\n")
    (tmp_path / "train.py").write_text('import hydra\n\n@hydra.main(config_path="conf", config_name="config")\n'
                                       "def main(cfg):\n    pass\n")
    profile = job_profile(["python", "train.py"], tmp_path, {"HF_HOME": str(hub.parent)})
    assert profile.train == {"micro_batch_size": 4}
    assert profile.model["hf_config"] == str(config)


def test_a_tier_without_train_takes_the_commands_knobs_and_keeps_its_env_and_gpu(tmp_path):
    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command

    write_hf_script(tmp_path)
    tier = load_profile("gpu-24gb", tmp_path)
    assert not tier.train and not tier.launch
    command = ["torchrun", "--nproc_per_node=2", "--nnodes=2", "train.py", "--per_device_train_batch_size", "8"]
    profile = with_command(tier, command, tmp_path)
    assert profile.train["micro_batch_size"] == 8 and profile.job is not None
    assert profile.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert profile.gpu["memory_gib"] == tier.gpu["memory_gib"] and profile.path == tier.path
    assert profile.launch == {"nproc_per_node": 2, "nnodes": 2} and profile.world_size == 4
    # What the terminal is told before launch: the knobs read, as with no profile.
    assert describe(profile)[0].startswith("read from the command (hf-trainer): micro_batch_size = 8")


def test_a_profile_with_train_but_no_launch_takes_the_launchers_world(tmp_path):
    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command

    (tmp_path / "p.toml").write_text("[train]\nmicro_batch_size = 4\n")
    command = ["torchrun", "--nproc_per_node=2", "--nnodes=2", "train.py"]
    profile = with_command(load_profile("p.toml", tmp_path), command, tmp_path)
    assert profile.train == {"micro_batch_size": 4} and profile.job is None  # its own [train] describes the job
    assert profile.world_size == 4 and profile.global_batch_size == 16
    # A [gpu] count the launcher contradicts is not papered over: the planner names both.
    (tmp_path / "q.toml").write_text("[gpu]\ncount = 4\n[train]\nmicro_batch_size = 4\n")
    assert with_command(load_profile("q.toml", tmp_path), command, tmp_path).launch == {"nnodes": 2}


def test_a_command_with_nothing_to_read_says_so_and_how_to_tell_gpudoc(tmp_path):
    profile = job_profile(["python", "-c", "print(1)"], tmp_path)
    [line] = describe(profile)
    assert line.startswith("read no knob from the command") and "profile" in line and "[bind]" in line
    assert "probe" in line


def test_a_run_under_a_tier_is_fixed_under_the_same_tier_and_its_commands_places(tmp_path):
    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command

    write_hf_script(tmp_path)
    ran = with_command(load_profile("gpu-24gb", tmp_path), COMMAND, tmp_path, {}).with_changes(
        {"micro_batch_size": 4}, {})
    record = RunRecord(id="r1", command=COMMAND, cwd=str(tmp_path), profile=ran.to_dict())
    again = recorded_job_profile(record, {})
    assert again is not None and again.name == "gpu-24gb" and again.job is not None
    assert again.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert again.changed_knobs() == {"micro_batch_size": 4}  # written back to the flag the command has
    assert again.for_planning().bind["args"] == "hf-trainer"


def test_llamafactory_cli_that_starts_torchrun_itself_takes_its_world_from_the_jobs_environment(tmp_path):
    """LLaMA-Factory's CLI starts torchrun itself (FORCE_TORCHRUN, or several GPUs visible) with
    NPROC_PER_NODE (else the visible GPUs) processes on NNODES nodes; its config is read verbatim."""
    import shutil
    from pathlib import Path

    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command

    real = Path(__file__).parents[1] / "fixtures" / "real" / "configs"
    config = tmp_path / "examples" / "train_lora" / "qwen3_lora_sft_ds3.yaml"
    config.parent.mkdir(parents=True)
    shutil.copy(real / "LLaMA-Factory__examples__train_lora__qwen3_lora_sft_ds3.yaml", config)
    tier = load_profile("gpu-24gb", tmp_path)
    command = ["llamafactory-cli", "train", "examples/train_lora/qwen3_lora_sft_ds3.yaml"]
    # Its README's two-node launch (FORCE_TORCHRUN=1 NNODES=2 RANK=0 MASTER_ADDR=...), four GPUs each.
    environ = {"FORCE_TORCHRUN": "1", "NNODES": "2", "RANK": "0", "MASTER_ADDR": "192.168.0.1",
               "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    profile = with_command(tier, command, tmp_path, environ)
    assert profile.launch == {"nproc_per_node": 4, "nnodes": 2} and profile.world_size == 8
    assert profile.train["micro_batch_size"] == 1 and profile.global_batch_size == 16
    assert ("note: llama-factory: its CLI starts torchrun itself (FORCE_TORCHRUN): processes per node from 4 GPUs "
            "in CUDA_VISIBLE_DEVICES, nodes from NNODES=2") in describe(profile)
    # NPROC_PER_NODE over the visible GPUs, set by an `env` in front of the program.
    forced = ["env", "FORCE_TORCHRUN=true", "NPROC_PER_NODE=2", *command]
    assert with_command(tier, forced, tmp_path, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}).launch == {
        "nproc_per_node": 2, "nnodes": 1}
    # Without FORCE_TORCHRUN: one process on one visible GPU, torchrun over several.
    assert with_command(tier, command, tmp_path, {"CUDA_VISIBLE_DEVICES": "0"}).launch == {"nproc_per_node": 1,
                                                                                           "nnodes": 1}
    assert with_command(tier, command, tmp_path, {"CUDA_VISIBLE_DEVICES": "0,1"}).world_size == 2
    # The machine's GPUs decide and none are named: nothing is guessed, the profile's [gpu] count answers.
    assert with_command(tier, command, tmp_path, {}).launch == {}
    # A profile with its own [train] and no [launch] takes the same world.
    (tmp_path / "p.toml").write_text("[train]\nmicro_batch_size = 1\n")
    assert with_command(load_profile("p.toml", tmp_path), command, tmp_path, environ).world_size == 8


def test_a_tier_takes_torchruns_one_process_per_visible_gpu_from_the_jobs_environment(tmp_path):
    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command

    write_hf_script(tmp_path)
    command = ["torchrun", "--nproc_per_node=gpu", "train.py", "--per_device_train_batch_size", "8"]
    tier = load_profile("gpu-24gb", tmp_path)
    assert with_command(tier, command, tmp_path, {"CUDA_VISIBLE_DEVICES": "0,1"}).launch == {"nproc_per_node": 2,
                                                                                            "nnodes": 1}
    assert with_command(tier, ["env", "CUDA_VISIBLE_DEVICES=3", *command], tmp_path, {}).world_size == 1
