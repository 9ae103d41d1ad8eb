"""`gpudoc estimate` as a function: capacity sources, history, exit status; the model the job names
when the profile has none, and every shipped profile either estimated or told the one fact it lacks."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpudoc.commands.estimate import estimate_command
from gpudoc.errors import ProfileError, UsageError
from gpudoc.profiles import shipped_profiles_dir
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from gpudoc.workspace import Workspace
from tests.conftest import captured_workspace, gpudoc_cli
from tests.estimate.hf_configs import CONFIGS
from tests.estimate.test_model_source import cache_model

PROFILE = """
[train]
micro_batch_size = 2
max_seq_len = 2048
precision = "bf16-true"
lora_rank = 8
gradient_checkpointing = true

[model]
layers = 32
hidden = 4096
heads = 32
ffn = 11008
vocab = 32000
"""


class _Machine(Workspace):
    """A workspace whose facts come from ``facts_source`` (a callable) instead of NVML."""

    facts_source = None

    def gather(self, **kwargs):
        return self.facts_source() if self.facts_source else super().gather(**kwargs)


def _run(*, gather=None, home=None, **kw):
    ws = captured_workspace(environ={"GPUDOC_HOME": str(home)} if home else None, cls=_Machine)
    ws.facts_source = gather
    status = estimate_command(ws, **kw)
    return status, ws.console.out.getvalue()


def _gather_with(total_bytes):
    gpu = SimpleNamespace(index=0, name="Fake GPU", memory_total_bytes=total_bytes)
    return lambda: SimpleNamespace(gpus=[gpu])


def test_capacity_from_the_detected_gpu(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    status, out = _run(as_json=True, gather=_gather_with(24 * 1024**3))
    doc = json.loads(out)
    assert status == 0
    assert doc["gpu_total_bytes"] == 24 * 1024**3 and doc["gpu_total_from"] == "GPU 0 (Fake GPU)"
    assert doc["max_micro_batch_size"] >= 2
    assert set(doc["breakdown"]) >= {"weights", "gradients", "optimizer", "activations", "logits"}
    assert doc["peak_bytes"] == sum(doc["breakdown"].values())
    assert doc["source"] == "formula"


def test_no_gpu_anywhere_still_estimates(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)

    def broken():
        raise RuntimeError("NVML Shared Library Not Found")

    status, out = _run(gather=broken)
    assert status == 0
    assert "GPU capacity unknown" in out and "peak allocated" in out


def test_does_not_fit_is_exit_1(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    status, out = _run(gpu_memory_gib=8.0, micro_batch_size=2)
    assert status == 1
    assert "does not fit" in out


def test_largest_micro_batch_is_0_when_none_fits_and_null_when_the_card_is_unknown(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    _, out = _run(as_json=True, gpu_memory_gib=4.0)
    assert json.loads(out)["max_micro_batch_size"] == 0  # the 7B weights alone are above a 4 GB card

    def no_gpu():
        raise RuntimeError("NVML Shared Library Not Found")

    _, out = _run(as_json=True, gather=no_gpu)
    assert json.loads(out)["max_micro_batch_size"] is None


def test_above_the_target_but_on_the_card_is_a_warning_not_a_no(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    _, out = _run(as_json=True, gpu_memory_gib=80.0, micro_batch_size=2)
    total = json.loads(out)["total_bytes"]
    card_gib = total / 0.92 / 1024**3  # the job takes 92% of this card: above the 85% target, below 100%
    status, out = _run(as_json=True, gpu_memory_gib=card_gib, micro_batch_size=2)
    doc = json.loads(out)
    assert status == 0 and doc["fit"] == "above_target" and doc["fits"] is False
    status, text = _run(gpu_memory_gib=card_gib, micro_batch_size=2)
    assert status == 0
    assert "the current micro_batch_size = 2 fits the card" in text and "above the target utilisation" in text
    assert "does not fit" not in text
    status, out = _run(as_json=True, gpu_memory_gib=card_gib * 0.9, micro_batch_size=2)
    assert status == 1 and json.loads(out)["fit"] == "does_not_fit"


def test_levers_already_pulled_are_not_suggested(isolated_home):
    # Checkpointing and LoRA are on, one GPU (no ZeRO): what is left is a shorter sequence.
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    status, text = _run(gpu_memory_gib=4.0, micro_batch_size=2)
    assert status == 1
    [line] = [ln for ln in text.splitlines() if "even micro_batch_size = 1" in ln]
    assert line.strip() == "even micro_batch_size = 1 is above the target: try a shorter max_seq_len (`gpudoc fix`)"


def test_a_big_vocabulary_names_the_chunked_cross_entropy(isolated_home):
    # A 1B model with a 256k vocabulary at micro batch 16 x 4096: the logits outweigh the rest.
    big_vocab = PROFILE.replace("layers = 32", "layers = 4").replace("vocab = 32000", "vocab = 256000") \
        .replace("micro_batch_size = 2", "micro_batch_size = 16").replace("max_seq_len = 2048", "max_seq_len = 4096")
    (isolated_home / "gpudoc.toml").write_text(big_vocab)
    _, out = _run(as_json=True, gpu_memory_gib=80.0)
    doc = json.loads(out)
    assert doc["breakdown"]["logits"] == max(doc["breakdown"].values())
    assert any("chunked or fused cross-entropy" in note and "--use_liger_kernel" in note for note in doc["notes"])
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    _, out = _run(as_json=True, gpu_memory_gib=80.0)
    assert not any("cross-entropy" in note for note in json.loads(out)["notes"])


def test_history_of_the_same_profile_corrects_the_estimate(isolated_home):
    path = isolated_home / "gpudoc.toml"
    path.write_text(PROFILE)
    store = RunStore(isolated_home / ".gpudoc")
    store.create(RunRecord(id="r1", command=["train"], cwd=".", status="ok", exit_code=0,
                           profile={"name": "gpudoc", "path": str(path),
                                    "knobs": {"micro_batch_size": 2, "max_seq_len": 2048, "precision": "bf16-true",
                                              "lora_rank": 8, "gradient_checkpointing": True}},
                           peak_memory_bytes={"0": 20 * 1024**3}))
    store.create(RunRecord(id="r2", command=["train"], cwd=".", status="ok", exit_code=0,
                           profile={"name": "other", "knobs": {"micro_batch_size": 2, "max_seq_len": 2048}},
                           peak_memory_bytes={"0": 70 * 1024**3}))
    _, plain = _run(as_json=True, gpu_memory_gib=80.0, home=isolated_home / "empty")
    _, corrected = _run(as_json=True, gpu_memory_gib=80.0)
    plain, corrected = json.loads(plain), json.loads(corrected)
    assert corrected["source"] == "formula corrected by 1 measured run"
    assert corrected["peak_bytes"] > plain["peak_bytes"]


def test_bad_switches_and_profiles_without_a_model(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[train]\nmax_seq_len = 1024\n")
    with pytest.raises(ProfileError, match="no \\[model\\], and no job command to read one from"):
        _run()
    with pytest.raises(UsageError, match="--gpu-memory"):
        _run(gpu_memory_gib=-1.0)


JOB_PROFILE = """
[gpu]
memory_gib = 24

[train]
micro_batch_size = 1
max_seq_len = 2048
precision = "bf16"
gradient_checkpointing = true
"""
HINT = ('set [model] hf_config = "ORG/NAME" (a config.json, its directory, or a model id in the local Hugging Face '
        'cache)')
# What each shipped profile's estimate says: a figure, or the one fact it lacks and the key that gives it.
SHIPPED = {
    "llama3.2-1b-4xa10g": None,
    "qwen2.5-7b-lora-24gb": None,
    "pretrain-512m-4x44gb": f"[model] hidden is missing: {HINT} or hidden = N",
    "mamba-16gb": '[model] arch = "state-space": a state-space model: the estimate\'s formula covers transformer '
                  "blocks (attention + MLP), not selective scans; [model] factory = \"module:function\" with "
                  "--simulate runs the model's own code instead",
    "contrastive-24gb": "no [model], and no job command to read one from (gpudoc estimate -- COMMAND): "
                        f"{HINT} or hidden, layers, heads, vocab",
}


def _json(ws) -> dict:
    return json.loads(ws.console.out.getvalue())


def test_the_model_on_the_jobs_command_line_comes_from_the_hf_cache(isolated_home, tmp_path):
    (isolated_home / "gpudoc.toml").write_text(JOB_PROFILE)
    hub = tmp_path / "hf" / "hub"
    config = cache_model(hub, "Qwen/Qwen2.5-7B", CONFIGS["Qwen/Qwen2.5-7B"])
    ws = captured_workspace(isolated_home, environ={"HF_HOME": str(hub.parent)})
    command = ["accelerate", "launch", "train.py", "--model_name_or_path", "Qwen/Qwen2.5-7B", "--bf16"]
    assert estimate_command(ws, as_json=True, command=command) == 1  # 7.6B parameters in 24 GiB: no
    data = _json(ws)
    assert data["notes"][0] == f"[model] from the job's --model_name_or_path = Qwen/Qwen2.5-7B: {config}"
    # The same figure as a profile that names the model itself.
    (isolated_home / "named.toml").write_text(JOB_PROFILE + f'\n[model]\nhf_config = "{config.parent}"\n')
    named = captured_workspace(isolated_home)
    estimate_command(named, profile_name="named.toml", as_json=True)
    assert _json(named)["peak_bytes"] == data["peak_bytes"] > 7.6e9 * 2


def test_without_a_command_the_profiles_last_run_names_the_model(isolated_home, tmp_path):
    (isolated_home / "gpudoc.toml").write_text(JOB_PROFILE)
    (isolated_home / "train.py").write_text("")
    hub = tmp_path / "hf" / "hub"
    env = {"HF_HOME": str(hub.parent)}
    cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    ran = gpudoc_cli("run", "--no-check", "--", "python", "train.py", "--model_name_or_path",
                     "meta-llama/Llama-3.2-1B", cwd=isolated_home, env=env)
    assert ran.returncode == 0, ran.stderr
    ws = captured_workspace(isolated_home, environ=env)
    assert estimate_command(ws, as_json=True, gpu_memory_gib=80.0) == 0
    assert "--model_name_or_path = meta-llama/Llama-3.2-1B" in _json(ws)["notes"][0]
    assert _json(ws)["inputs"]["params"] == 1_235_814_400


def test_with_no_profile_the_knobs_come_from_the_job_as_run_reads_them(isolated_home, tmp_path):
    hub = tmp_path / "hf" / "hub"
    env = {"HF_HOME": str(hub.parent)}
    cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    command = ["torchrun", "--nproc_per_node", "2", "train.py", "--model_name_or_path", "meta-llama/Llama-3.2-1B",
               "--per_device_train_batch_size", "3", "--max_seq_length", "256", "--bf16"]
    ws = captured_workspace(isolated_home, environ=env)
    estimate_command(ws, as_json=True, gpu_memory_gib=80.0, command=command)
    data = _json(ws)
    inputs = data["inputs"]
    assert (inputs["micro_batch_size"], inputs["max_seq_len"], inputs["precision"], inputs["world_size"]) == \
        (3, 256, "bf16", 2)
    read = next(note for note in data["notes"] if note.startswith("read from the command"))
    assert "micro_batch_size = 3 (argv:--per_device_train_batch_size)" in read
    # Without a command: the newest run launched without a profile, with the knobs it ran with.
    (isolated_home / "train.py").write_text("")
    ran = gpudoc_cli("run", "--no-check", "--", "python", "train.py", *command[4:8], "--max_seq_length", "64",
                     cwd=isolated_home, env=env)
    assert ran.returncode == 0, ran.stderr
    again = captured_workspace(isolated_home, environ=env)
    estimate_command(again, as_json=True, gpu_memory_gib=80.0)
    assert (_json(again)["inputs"]["micro_batch_size"], _json(again)["inputs"]["max_seq_len"]) == (3, 64)


def test_with_no_profile_a_command_without_a_sequence_length_is_told_how_to_give_one(isolated_home, tmp_path):
    hub = tmp_path / "hf" / "hub"
    cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    ws = captured_workspace(isolated_home, environ={"HF_HOME": str(hub.parent)})
    with pytest.raises(ProfileError, match=r"^the job's command and configs give no sequence length .*"
                                           r"\[train\] max_seq_len = N") as raised:
        estimate_command(ws, command=["python", "train.py", "--model_name_or_path", "meta-llama/Llama-3.2-1B"])
    assert "profile" not in str(raised.value).split(":")[0]  # there is none to set it in yet


def test_a_job_that_names_no_model_is_said_so(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(JOB_PROFILE)
    with pytest.raises(ProfileError, match=r"no \[model\], and the job's command names no model \(--model_name_or_path"):
        estimate_command(captured_workspace(isolated_home), command=["python", "train.py", "--bf16"])


def test_with_no_profile_a_missing_model_is_not_asked_of_a_profile(isolated_home):
    ws = captured_workspace(isolated_home)
    with pytest.raises(ProfileError, match=r"^no profile, and no job command to read a model from "
                                           r"\(gpudoc estimate -- COMMAND\): a profile with \[model\] hf_config"):
        estimate_command(ws)
    with pytest.raises(ProfileError, match=r"^no profile, and the job's command names no model \(--model_name_or_path"):
        estimate_command(ws, command=["python", "train.py", "--per_device_train_batch_size", "4"])


def test_a_named_model_missing_from_the_cache_is_one_line(isolated_home, tmp_path):
    (isolated_home / "gpudoc.toml").write_text(JOB_PROFILE)
    ws = captured_workspace(isolated_home, environ={"HF_HOME": str(tmp_path / "hf")})
    with pytest.raises(ProfileError) as caught:
        estimate_command(ws, command=["torchrun", "--nproc_per_node=2", "train.py", "model.name_or_path=org/absent"])
    assert str(caught.value).startswith('the job\'s model.name_or_path = "org/absent": no such file beside ')
    assert f'no model "org/absent" in the Hugging Face cache {tmp_path / "hf" / "hub"}' in str(caught.value)


@pytest.mark.parametrize("name", sorted(p.stem for p in shipped_profiles_dir().glob("*.toml")))
def test_every_shipped_profile_is_estimated_or_names_what_it_lacks(isolated_home, name):
    ws = captured_workspace(isolated_home)
    expected = SHIPPED.get(name, f"no [model], and no job command to read one from (gpudoc estimate -- COMMAND): "
                                 f"{HINT}")  # the GPU tiers
    if expected is None:
        assert estimate_command(ws, profile_name=name, as_json=True) in (0, 1)
        assert _json(ws)["peak_bytes"] > 0
        return
    with pytest.raises(ProfileError) as caught:
        estimate_command(ws, profile_name=name)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_tier_without_a_command_reads_the_knobs_of_its_last_run(isolated_home, tmp_path):
    hub = tmp_path / "hf" / "hub"
    env = {"HF_HOME": str(hub.parent)}
    cache_model(hub, "meta-llama/Llama-3.2-1B", CONFIGS["meta-llama/Llama-3.2-1B"])
    (isolated_home / "train.py").write_text("")
    ran = gpudoc_cli("run", "-p", "gpu-24gb", "--no-check", "--", "python", "train.py", "--model_name_or_path",
                     "meta-llama/Llama-3.2-1B", "--per_device_train_batch_size", "2", "--max_seq_length", "128",
                     "--bf16", cwd=isolated_home, env=env)
    assert ran.returncode == 0, ran.stderr
    ws = captured_workspace(isolated_home, environ=env)
    assert estimate_command(ws, profile_name="gpu-24gb", as_json=True) in (0, 1)  # an answer, not an error
    data = _json(ws)
    assert (data["inputs"]["micro_batch_size"], data["inputs"]["max_seq_len"], data["inputs"]["precision"]) == \
        (2, 128, "bf16")
    assert data["gpu_total_from"] == "[gpu] memory_gib"


def test_simulate_behind_uv_run_runs_in_the_projects_environment(isolated_home):
    """`estimate --simulate -- uv run python train.py`: the simulation is asked of the project's
    environment as the real uv names it (here one without torch, so the formula answers and says
    which interpreter had none), not of the python on PATH, nor of another virtual environment that
    is active (uv run leaves it aside without --active)."""
    from tests.job.scripts import write_hf_script
    from tests.job.test_envtools import _real_uv, _uv_venv

    environ = _real_uv(isolated_home)
    (isolated_home / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\ndependencies = []\n')
    venv_python = _uv_venv(environ, isolated_home / ".venv")
    environ["VIRTUAL_ENV"] = str(_uv_venv(environ, isolated_home / "active").parent.parent)
    write_hf_script(isolated_home)
    (isolated_home / "tiny").mkdir()
    (isolated_home / "tiny" / "config.json").write_text(json.dumps(CONFIGS["meta-llama/Llama-3.2-1B"]))
    done = gpudoc_cli("estimate", "-p", "gpu-24gb", "--simulate", "--json", "--", "uv", "run", "python", "train.py",
                      "--model_name_or_path", "./tiny", "--per_device_train_batch_size", "1", "--max_seq_length", "128",
                      cwd=isolated_home,
                      env=environ)
    notes = json.loads(done.stdout)["notes"]
    assert f"simulation unavailable, the formula answers: no torch in the job's interpreter ({venv_python})" in notes
