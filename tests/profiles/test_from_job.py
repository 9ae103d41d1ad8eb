"""A profile for a job that has none: what its command says, the model it names found in the local
Hugging Face cache, what the terminal is told, and the profile a recorded run is fixed with."""

from __future__ import annotations

from gpudoc.profiles.from_job import describe, job_profile, recorded_job_profile
from gpudoc.runs.record import RunRecord
from tests.estimate.hf_configs import CONFIGS
from tests.estimate.test_model_source import cache_model

COMMAND = ["torchrun", "--nproc_per_node=2", "train.py", "--model_name_or_path", "meta-llama/Llama-3.2-1B",
           "--per_device_train_batch_size", "8", "--max_seq_length", "2048"]


def test_the_model_the_command_names_is_found_in_the_cache(tmp_path):
    hub = tmp_path / "hf" / "hub"
    config = cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    profile = job_profile(COMMAND, tmp_path, {"HF_HOME": str(hub.parent)})
    assert profile.model["hf_config"] == str(config)
    assert profile.train["micro_batch_size"] == 8 and profile.train["max_seq_len"] == 2048
    assert profile.world_size == 2
    # Which config.json was read, said before launch and in the estimate's notes.
    assert profile.job is not None and profile.job.notes == [
        f"[model] from the job's --model_name_or_path = meta-llama/Llama-3.2-1B: {config}"]


def test_a_model_not_in_the_cache_is_a_note_and_the_job_still_runs(tmp_path):
    profile = job_profile(COMMAND, tmp_path, {"HF_HOME": str(tmp_path / "empty")})
    assert profile.model == {}
    assert profile.train["micro_batch_size"] == 8
    [line, note] = describe(profile)
    assert line.startswith("read from the command (hf-trainer): micro_batch_size = 8 "
                           "(argv:--per_device_train_batch_size)")
    assert note.startswith("note: ") and "meta-llama/Llama-3.2-1B" in note


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
