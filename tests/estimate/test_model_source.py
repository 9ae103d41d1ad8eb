"""Finding a model's config.json (file, directory, local Hugging Face cache) and the model a job names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoc.errors import ProfileError
from gpudoc.estimate.model_source import (
    NamedModel,
    find_model_config,
    hf_hub_cache,
    job_config_data,
    model_name_from_job,
    with_job_model,
)
from gpudoc.profiles.model import Profile
from tests.conftest import REPO, call_beside_fifo
from tests.estimate.hf_configs import CONFIGS


def cache_model(hub: Path, model_id: str, config: dict, *, commit: str = "a" * 40, main: bool = True,
                mtime: float | None = None) -> Path:
    """One model in a cache laid out as huggingface_hub lays it: blobs, snapshots, refs."""
    repo = hub / ("models--" + model_id.replace("/", "--"))
    blob = repo / "blobs" / (commit[:8] + "0" * 32)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(json.dumps(config))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(os.path.relpath(blob, snapshot))
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    if mtime is not None:
        os.utime(snapshot / "config.json", (mtime, mtime), follow_symlinks=True)
    return snapshot / "config.json"


@pytest.fixture
def hub(tmp_path) -> Path:
    return tmp_path / "hf" / "hub"


def env_of(hub: Path) -> dict[str, str]:
    return {"HF_HOME": str(hub.parent)}


def test_cache_location_follows_huggingface_hub_rules(tmp_path):
    assert hf_hub_cache({"HF_HOME": str(tmp_path)}) == tmp_path / "hub"
    assert hf_hub_cache({"HF_HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "elsewhere")}) == \
        tmp_path / "elsewhere"
    assert hf_hub_cache({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "huggingface" / "hub"
    assert hf_hub_cache({}) == Path("~/.cache/huggingface/hub").expanduser()


def test_model_id_is_found_in_the_cache_by_refs_main(hub):
    llama = CONFIGS["meta-llama/Llama-3.2-1B"]
    pinned = cache_model(hub, "meta-llama/Llama-3.2-1B", llama, commit="1" * 40, mtime=1_000)
    # A newer snapshot that refs/main does not name (another revision downloaded later).
    cache_model(hub, "meta-llama/Llama-3.2-1B", {**llama, "num_hidden_layers": 99}, commit="2" * 40,
                main=False, mtime=2_000)
    found = find_model_config("meta-llama/Llama-3.2-1B", environ=env_of(hub))
    assert found == pinned and json.loads(found.read_text())["num_hidden_layers"] == 16


def test_without_refs_main_the_newest_snapshot_is_read(hub):
    gpt2 = CONFIGS["gpt2"]
    cache_model(hub, "gpt2", gpt2, commit="1" * 40, main=False, mtime=1_000)
    newest = cache_model(hub, "gpt2", {**gpt2, "n_layer": 6}, commit="2" * 40, main=False, mtime=2_000)
    assert find_model_config("gpt2", environ=env_of(hub)) == newest


def test_a_bare_name_finds_the_one_organisation_holding_it(hub):
    only = cache_model(hub, "openai-community/gpt2", CONFIGS["gpt2"])
    assert find_model_config("gpt2", environ=env_of(hub)) == only
    cache_model(hub, "someone/gpt2", CONFIGS["gpt2"])
    with pytest.raises(ProfileError, match="no model \"gpt2\" in the Hugging Face cache"):
        find_model_config("gpt2", environ=env_of(hub))  # two owners: not guessed


def test_hf_hub_cache_variable_is_honoured(tmp_path):
    hub = tmp_path / "custom-cache"
    found = cache_model(hub, "Qwen/Qwen2.5-7B", CONFIGS["Qwen/Qwen2.5-7B"])
    assert find_model_config("Qwen/Qwen2.5-7B", environ={"HF_HUB_CACHE": str(hub)}) == found


def test_a_local_file_or_directory_wins_over_the_cache(tmp_path, hub):
    cache_model(hub, "org/model", CONFIGS["gpt2"])
    local = tmp_path / "org" / "model"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(CONFIGS["EleutherAI/pythia-160m"]))
    assert find_model_config("org/model", bases=[tmp_path], environ=env_of(hub)) == local / "config.json"
    assert find_model_config(str(local / "config.json"), environ=env_of(hub)) == local / "config.json"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProfileError, match="empty is a directory without a config.json"):
        find_model_config("empty", bases=[tmp_path], environ=env_of(hub))


def test_a_model_nowhere_is_one_line_naming_the_cache_and_the_fix(tmp_path, hub):
    with pytest.raises(ProfileError) as caught:
        find_model_config("meta-llama/Llama-3.2-1B", bases=[tmp_path], environ=env_of(hub))
    message = str(caught.value)
    assert "\n" not in message and caught.value.key == "model.hf_config"
    assert f'no model "meta-llama/Llama-3.2-1B" in the Hugging Face cache {hub}' in message
    assert "huggingface-cli download meta-llama/Llama-3.2-1B config.json" in message
    assert '[model] hf_config = "path/to/config.json"' in message
    with pytest.raises(ProfileError, match=r"\./nope/config.json\": no such file beside .*: set \[model\] hf_config"):
        find_model_config("./nope/config.json", bases=[tmp_path], environ=env_of(hub))


def test_the_resolver_never_imports_a_hub_client(tmp_path, hub):
    cache_model(hub, "gpt2", CONFIGS["gpt2"])
    code = ("import sys; from gpudoc.estimate.hf_config import read_hf_config\n"
            "from gpudoc.profiles.model import Profile\n"
            "read_hf_config(Profile(name='p'), 'gpt2')\n"
            "assert not [m for m in sys.modules if m.startswith(('huggingface_hub', 'transformers', 'requests', "
            "'httpx', 'urllib.request'))], sorted(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "HF_HOME": str(hub.parent),
                                 "HF_HUB_OFFLINE": "0"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("args, named", [
    (["--model_name_or_path", "Qwen/Qwen2.5-7B", "--per_device_train_batch_size", "2"],
     NamedModel("Qwen/Qwen2.5-7B", "argv:--model_name_or_path")),
    (["--model-name-or-path=gpt2"], NamedModel("gpt2", "argv:--model-name-or-path")),
    (["--base_model", "org/base", "--model", "other"], NamedModel("org/base", "argv:--base_model")),
    (["fit", "--model.init_args.model_name_or_path", "bert-base-uncased", "--data.batch_size", "8"],
     NamedModel("bert-base-uncased", "argv:--model.init_args.model_name_or_path")),
    (["model.name_or_path=meta-llama/Llama-3.2-1B", "data_loader.batch_size=45"],
     NamedModel("meta-llama/Llama-3.2-1B", "argv:model.name_or_path")),
    (["++model.pretrained_model_name_or_path=t5-small"], NamedModel("t5-small", "argv:model.pretrained_model_name_or_path")),
    (["--config", "llama3_2/1B_lora.yaml", "checkpointer.checkpoint_dir=/ckpt/Llama-3.2-1B"],
     NamedModel("/ckpt/Llama-3.2-1B", "argv:checkpointer.checkpoint_dir")),
    (["config/train_shakespeare.py", "--init_from=gpt2-medium"], NamedModel("gpt2-medium", "argv:--init_from")),
    (["config/train_shakespeare.py", "--init_from=scratch"], None),
    (["model.name_or_path=${oc.env:MODEL}"], None),
    (["model=llama3_8b", "trainer.max_epochs=1"], None),
    (["--model", "gpt2", "--epochs", "1"], NamedModel("gpt2", "argv:--model")),
    (["--per_device_train_batch_size", "8", "--bf16"], None),
])
def test_the_model_named_on_the_command_line(args, named):
    assert model_name_from_job(args, {}) == named


def test_the_model_named_in_config_files_and_overrides_beat_them():
    axolotl = {"base_model": "NousResearch/Llama-3.2-1B", "micro_batch_size": 2}
    torchtune = {"checkpointer": {"checkpoint_dir": "/tmp/Llama-3.2-1B/", "_component_": "torchtune.x"}}
    hydra = {"model": {"name_or_path": "Qwen/Qwen2.5-7B"}, "data_loader": {"batch_size": 45}}
    assert model_name_from_job([], axolotl) == NamedModel("NousResearch/Llama-3.2-1B", "file:config:base_model")
    assert model_name_from_job([], [("tune.yaml", torchtune)]).where == "file:tune.yaml:checkpointer.checkpoint_dir"
    assert model_name_from_job([], [("a.yaml", hydra), ("b.yaml", {"model_name_or_path": "later/one"})]) == \
        NamedModel("later/one", "file:b.yaml:model_name_or_path")
    assert model_name_from_job(["model.name_or_path=gpt2"], [("conf.yaml", hydra)]) == \
        NamedModel("gpt2", "argv:model.name_or_path")
    assert model_name_from_job([], {"init_from": "resume", "batch_size": 12}) is None


def test_config_files_named_by_the_job_are_read(tmp_path):
    (tmp_path / "axolotl.yml").write_text("base_model: NousResearch/Llama-3.2-1B\nsequence_len: 2048\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": "auto"}')
    (tmp_path / "broken.yaml").write_text("a: [unclosed\n")
    data = job_config_data(["axolotl.yml", "--deepspeed=ds.json", "broken.yaml", "missing.yaml"], tmp_path)
    assert [name for name, _ in data] == ["axolotl.yml", "ds.json"]
    assert model_name_from_job([], data) == NamedModel("NousResearch/Llama-3.2-1B", "file:axolotl.yml:base_model")


def test_a_fifo_named_like_a_config_is_skipped_not_read(tmp_path):
    """`gpudoc estimate -- axolotl train cfg.yaml` with cfg.yaml a named pipe: opening it would wait
    for a writer forever."""
    os.mkfifo(tmp_path / "cfg.yaml")
    assert call_beside_fifo(tmp_path / "cfg.yaml", lambda: job_config_data(["cfg.yaml"], tmp_path)) == []


def test_a_config_larger_than_any_real_one_is_not_parsed_for_the_model(tmp_path):
    padding = "".join(f"  - path: data/shard_{i:06d}.jsonl\n" for i in range(40_000))
    (tmp_path / "cfg.yml").write_text(f"base_model: org/model\ndatasets:\n{padding}")
    assert job_config_data(["cfg.yml"], tmp_path) == []


def test_a_profile_without_model_takes_the_jobs(tmp_path, hub):
    path = cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    argv = ["torchrun", "--nproc_per_node", "4", "train.py", "--model_name_or_path", "meta-llama/Llama-3.2-1B"]
    profile, note = with_job_model(Profile(name="p", model={"layers": 8}), argv, tmp_path, env_of(hub))
    assert profile.model == {"hf_config": str(path), "layers": 8}  # the profile's own keys still win
    assert note == f"[model] from the job's --model_name_or_path = meta-llama/Llama-3.2-1B: {path}"
    complete = Profile(name="p", model={"hidden": 64, "layers": 2, "heads": 2, "vocab": 100})
    assert with_job_model(complete, argv, tmp_path, env_of(hub)) == (complete, None)
    assert with_job_model(Profile(name="p"), ["python", "train.py", "--bf16"], tmp_path, env_of(hub))[1] is None
    with pytest.raises(ProfileError, match="the job's --model_name_or_path = \"org/absent\": no such file"):
        with_job_model(Profile(name="p"), ["python", "t.py", "--model_name_or_path", "org/absent"], tmp_path,
                       env_of(hub))
