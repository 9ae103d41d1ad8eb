"""What the simulation is told: a profile of shapes alone is built as what it says (its dropout, its
attention layout, the formula's reading of what it cannot name) or not simulated, with the reason;
the adapters' targets are the formula's, named once."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpudoc.commands.estimate import estimate_command
from gpudoc.estimate.inputs import model_shape, train_setup
from gpudoc.estimate.sim_spec import simulation_spec, unsupported_reason
from gpudoc.profiles.model import Profile
from tests.conftest import captured_workspace

GPT2_SHAPE = {"hidden": 64, "layers": 2, "heads": 4, "ffn": 256, "vocab": 512, "tied_embeddings": True}
LLAMA_SHAPE = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 32, "ffn": 176, "vocab": 512}
TRAIN = {"micro_batch_size": 2, "max_seq_len": 128, "precision": "bf16"}


def _profile(tmp_path: Path, model: dict, train: dict | None = None, launch: dict | None = None) -> Profile:
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    return Profile(name="p", path=path, chain=(path,), model=model, train={**TRAIN, **(train or {})},
                   launch=launch or {})


def _read(profile: Profile) -> tuple[dict, list[str], str | None, list[str]]:
    """The spec, its notes, the reason it cannot run (None) and the formula's notes, for ``profile``."""
    shape, notes, extras = model_shape(profile)
    setup = train_setup(profile, notes, extras)
    spec, said = simulation_spec(profile, shape, setup, [setup.micro_batch_size])
    return spec, said, unsupported_reason(profile, setup, shape), notes


def test_a_plain_mlp_decoder_of_shapes_is_simulated_with_the_profiles_dropout_and_a_fused_gelu(tmp_path):
    spec, said, reason, _ = _read(_profile(tmp_path, GPT2_SHAPE, {"dropout": 0.0}))
    config = spec["hf_config"]
    assert reason is None and config["model_type"] == "gpt2"
    assert config["activation_function"] == "gelu"  # never gelu_new, GPT-2's composed default
    assert config["resid_pdrop"] == config["embd_pdrop"] == config["attn_pdrop"] == 0.0
    assert said == ["no config.json: simulated as a gpt2 model of the profile's shapes (LayerNorm, a fused GELU, "
                    "dropout 0)"]
    # Silent about dropout: the family default the formula reads, the same in both.
    silent = _read(_profile(tmp_path, GPT2_SHAPE))
    assert silent[0]["hf_config"]["resid_pdrop"] == 0.1 and "dropout 0.1" in silent[1][0]


@pytest.mark.parametrize("model", [GPT2_SHAPE, LLAMA_SHAPE, {**GPT2_SHAPE, "arch": "encoder"},
                                   {**LLAMA_SHAPE, "arch": "encoder-decoder", "kv_heads": 4}],
                         ids=["gpt2", "llama", "bert", "t5"])
def test_the_profiles_tied_or_separate_output_embeddings_reach_the_simulated_config(tmp_path, model):
    for tied in (True, False):
        config = _read(_profile(tmp_path, {**model, "tied_embeddings": tied}))[0]["hf_config"]
        assert config["tie_word_embeddings"] is tied, config["model_type"]


def test_a_gated_decoder_of_shapes_keeps_its_kv_heads_and_head_dim(tmp_path):
    spec, _, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE))
    config = spec["hf_config"]
    assert reason is None and config["model_type"] == "llama"
    assert (config["num_key_value_heads"], config["head_dim"], config["intermediate_size"]) == (2, 32, 176)


@pytest.mark.parametrize("model, train, why", [
    ({**GPT2_SHAPE, "kv_heads": 2}, {}, "the gpt2 class it is simulated as has no grouped K/V heads (kv_heads = 2 of 4)"),
    ({**GPT2_SHAPE, "head_dim": 32}, {}, "the gpt2 class it is simulated as has no head_dim of its own"),
    (LLAMA_SHAPE, {"dropout": 0.1}, "the llama class it is simulated as has no dropout on its residual stream "
                                    "([train] dropout = 0.1)"),
    ({**LLAMA_SHAPE, "arch": "encoder"}, {}, "the bert class it is simulated as has no gated MLP"),
    ({**GPT2_SHAPE, "arch": "encoder-decoder"}, {}, "the t5 class it is simulated as has RMSNorm blocks"),
])
def test_what_a_shapes_only_profile_says_that_no_class_holds_is_the_formulas_with_the_reason(tmp_path, model,
                                                                                              train, why):
    reason = _read(_profile(tmp_path, model, train))[2]
    assert reason is not None and reason.startswith("[model] gives shapes and no hf_config: ") and why in reason


def test_a_config_json_model_is_simulated_with_the_profiles_dropout(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                                      "vocab_size": 512, "resid_pdrop": 0.1}))
    told = _read(_profile(tmp_path, {"hf_config": "config.json"}, {"dropout": 0.0}))[0]["hf_config"]
    assert told["resid_pdrop"] == told["embd_pdrop"] == told["attn_pdrop"] == 0.0
    own = _read(_profile(tmp_path, {"hf_config": "config.json"}))[0]["hf_config"]
    assert own["resid_pdrop"] == 0.1 and "attn_pdrop" not in own  # the config's own, untouched


@pytest.mark.parametrize("model_type, roles, names", [
    ("gpt2", ("q", "k", "v"), ["c_attn"]),
    ("phi", ("q", "v", "up", "down"), ["q_proj", "v_proj", "fc1", "fc2"]),
    ("llama", ("q", "v"), ["q_proj", "v_proj"]),
])
def test_unset_lora_targets_are_pefts_default_for_the_family_in_both_paths(tmp_path, model_type, roles, names):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 64, "n_embd": 64,
                                                      "num_hidden_layers": 2, "n_layer": 2, "num_attention_heads": 4,
                                                      "n_head": 4, "vocab_size": 512}))
    profile = _profile(tmp_path, {"hf_config": "config.json"}, {"lora_rank": 8})
    spec, _, _, notes = _read(profile)
    extras = model_shape(profile)[2]
    assert train_setup(profile, [], extras).lora_targets == roles  # what the formula counts
    assert spec["lora"]["target_names"] == names  # what the simulation hands peft
    assert f"[train] lora_targets not set: peft's default for {model_type}: {', '.join(names)}" in notes


def test_named_lora_targets_reach_the_simulation_and_say_nothing(tmp_path):
    spec, _, _, notes = _read(_profile(tmp_path, LLAMA_SHAPE, {"lora_rank": 8, "lora_targets": ["q_proj", "o_proj"]}))
    assert {"q_proj", "o_proj"} <= set(spec["lora"]["target_names"]) and "v_proj" not in spec["lora"]["target_names"]
    assert not any("lora_targets not set" in n for n in notes)


def test_an_encoder_decoder_without_a_target_length_says_its_reading(tmp_path):
    t5 = {"arch": "encoder-decoder", "hidden": 64, "layers": 4, "heads": 4, "ffn": 176, "vocab": 512}
    notes = _read(_profile(tmp_path, t5, {"lora_rank": 8}))[3]
    assert [n for n in notes if "max_target_len" in n] == [
        "[train] max_target_len not set: the decoder's targets are taken as long as the inputs (max_seq_len); "
        "set it to the job's target length"]
    told = _read(_profile(tmp_path, t5, {"lora_rank": 8, "max_target_len": 32}))
    assert told[0]["target_len"] == 32 and not any("max_target_len" in n for n in told[3])


# --- through `gpudoc estimate --simulate --json`, real torch on a tiny model -------------------------

def _simulated(directory: Path, train: str) -> dict:
    pytest.importorskip("transformers")
    directory.mkdir()
    model = "\n".join(f"{k} = {json.dumps(v)}" for k, v in GPT2_SHAPE.items()).replace("True", "true")
    (directory / "gpudoc.toml").write_text(f"[train]\nmicro_batch_size = 2\nmax_seq_len = 128\nprecision = \"bf16\"\n"
                                           f"{train}\n[model]\n{model}\n")
    ws = captured_workspace(directory)
    estimate_command(ws, as_json=True, simulate=True, python=sys.executable)
    return json.loads(ws.console.out.getvalue())


def test_the_profiles_dropout_reaches_the_simulated_step(tmp_path):
    off, silent = _simulated(tmp_path / "off", "dropout = 0.0"), _simulated(tmp_path / "silent", "")
    assert off["source"] == silent["source"] == "simulation", (off["notes"], silent["notes"])
    # The silent profile trains with the family's 0.1 (as the formula reads it): one 1-byte mask per
    # dropout (the embeddings' and two per block), what CUDA's native_dropout keeps and nothing else.
    tokens, masks = 2 * 128, 1 + 2 * GPT2_SHAPE["layers"]
    assert silent["breakdown"]["activations"] - off["breakdown"]["activations"] == masks * tokens * GPT2_SHAPE["hidden"]
    assert any("dropout 0.1" in n for n in silent["notes"]) and any("dropout 0)" in n for n in off["notes"])


@pytest.mark.parametrize("named, modules", [
    (["c_attn"], (("q", "k", "v"),)),
    (["q_proj", "v_proj"], (("q",), ("v",))),
    (["q_proj", "mlp"], (("q",), ("gate",), ("up",), ("down",))),
])
def test_each_named_layer_is_one_adapter_a_fused_one_too(tmp_path, named, modules):
    _, extras = model_shape(_profile(tmp_path, GPT2_SHAPE))[1:]
    setup = train_setup(_profile(tmp_path, GPT2_SHAPE, {"lora_rank": 8, "lora_targets": named}), [], extras)
    assert setup.lora_modules == modules


DEEPSPEED_DEFAULTS = {"reduce_bucket_size": 5e8, "overlap_comm": False, "contiguous_gradients": True,
                      "offload_optimizer": False}


@pytest.mark.parametrize("train, launch, simulated", [
    ({"zero_stage": 2}, {"nproc_per_node": 4}, {"stage": 2, "world": 4, **DEEPSPEED_DEFAULTS}),
    ({"zero_stage": 1}, {"nproc_per_node": 2, "nnodes": 2}, {"stage": 1, "world": 4, **DEEPSPEED_DEFAULTS}),
    ({"zero_stage": 2}, {}, None),  # one GPU: nothing to shard, the plain step
])
def test_deepspeed_zero_1_and_2_are_simulated_as_one_ranks_share(tmp_path, train, launch, simulated):
    spec, said, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, train, launch))
    assert reason is None and spec.get("zero") == simulated
    assert (f"ZeRO-{train['zero_stage']} over 4 GPUs: one rank's share simulated with DeepSpeed's defaults"
            in said) == bool(simulated)


def test_zero_2_with_the_optimizer_on_the_host_is_simulated(tmp_path):
    spec, said, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, {"zero_stage": 2, "offload_optimizer": True},
                                           {"nproc_per_node": 4}))
    assert reason is None and spec["zero"] == {"stage": 2, "world": 4, **DEEPSPEED_DEFAULTS, "offload_optimizer": True}
    assert "ZeRO-2 over 4 GPUs: one rank's share (the optimizer on the host) simulated with DeepSpeed's defaults" in said


def test_zero_1_is_simulated_with_the_jobs_own_deepspeed_json(tmp_path):
    """axolotl's zero1.json, verbatim: overlap_comm on, so the simulated rank holds two buckets."""
    from gpudoc.estimate.zero_settings import setup_with_job_settings
    from gpudoc.job.knobs import read_job
    from tests.conftest import FIXTURES

    (tmp_path / "zero1.json").write_text((FIXTURES / "real" / "heldout" / "axolotl__deepspeed_configs__zero1.json")
                                         .read_text())
    (tmp_path / "train.py").write_text("import deepspeed\n")
    job = read_job(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed_config", "zero1.json"], tmp_path)
    profile = _profile(tmp_path, LLAMA_SHAPE, {"zero_stage": 1}, {"nproc_per_node": 4})
    shape, notes, extras = model_shape(profile)
    setup = setup_with_job_settings(train_setup(profile, notes, extras), replace(profile, job=job))
    spec, said = simulation_spec(profile, shape, setup, [1])
    assert spec["zero"] == {"stage": 1, "world": 4, **DEEPSPEED_DEFAULTS, "overlap_comm": True}
    assert "ZeRO-1 over 4 GPUs: one rank's share simulated with the job's DeepSpeed JSON (overlap_comm true; " \
           "DeepSpeed's defaults for the rest)" in said


@pytest.mark.parametrize("train, why", [
    ({"fsdp": True}, "FSDP sharding across GPUs is not simulated"),
    ({"zero_stage": 2, "fsdp": True}, "ZeRO-2 sharding across GPUs is not simulated"),
    ({"zero_stage": 2, "offload_params": True}, "CPU offload is not simulated"),
    ({"offload_optimizer": True}, "CPU offload is not simulated"),
])
def test_fsdp_and_offload_outside_deepspeeds_stay_the_formulas(tmp_path, train, why):
    assert why in (_read(_profile(tmp_path, LLAMA_SHAPE, train, {"nproc_per_node": 4}))[2] or "")


def test_torchtunes_fp32_logits_loss_is_simulated_and_a_factorys_own_loss_is_not(tmp_path):
    spec, _, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, {"loss": "fp32_logits"}))
    assert reason is None and spec["loss"] == "fp32_logits"
    spec, _, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE))
    assert reason is None and "loss" not in spec
    _, _, reason, _ = _read(_profile(tmp_path, {**LLAMA_SHAPE, "factory": "job:build"}, {"loss": "fp32_logits"}))
    assert reason == 'loss = "fp32_logits": the job\'s own loss code'
    _, _, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, {"loss": "chunked"}))
    assert reason == 'loss = "chunked": the job\'s own loss code'


def test_a_litgpt_jobs_own_loss_is_its_factorys_step_and_the_formulas_without_one(tmp_path):
    """A LitGPT job's loss is LitGPT's own (``fp32_chunks``): a factory running its step computes it; a
    model built from config.json or shapes would not, so the formula answers; stated with a factory, the
    profile's loss is not what the factory computes."""
    def litgpt(model: dict, train: dict | None = None) -> Profile:
        return replace(_profile(tmp_path, model, train), bind={"args": "litgpt"})

    spec, _, reason, _ = _read(litgpt({**LLAMA_SHAPE, "factory": "job:build"}))
    assert reason is None and "loss" not in spec
    assert _read(litgpt(LLAMA_SHAPE))[2] == ('loss = "fp32_chunks": the job\'s own loss code (a [model] factory '
                                            'that runs the job\'s step is simulated with it)')
    _, _, reason, _ = _read(litgpt({**LLAMA_SHAPE, "factory": "job:build"}, {"loss": "fp32_chunks"}))
    assert reason == 'loss = "fp32_chunks": the job\'s own loss code'


def test_a_classification_head_is_simulated_as_transformers_builds_one(tmp_path):
    spec, _, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, {"loss": "classification"}))
    assert reason is None and spec["loss"] == "classification"
    _, _, reason, _ = _read(_profile(tmp_path, {**LLAMA_SHAPE, "factory": "job:build"}, {"loss": "classification"}))
    assert reason == 'loss = "classification": the job\'s own loss code'


def test_a_loss_without_upcast_reaches_the_simulation_and_a_factorys_own_loss_stays_its_own(tmp_path):
    spec, _, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, {"loss_upcast": False}))
    assert reason is None and spec["loss"] == "half_logits"
    spec, _, reason, _ = _read(_profile(tmp_path, {**LLAMA_SHAPE, "factory": "job:build"}, {"loss_upcast": False}))
    assert reason is None and "loss" not in spec


def test_deepspeed_zero_3_with_the_optimizer_on_the_host_is_simulated_in_its_gather_order(tmp_path):
    train = {"zero_stage": 3, "offload_optimizer": True, "offload_params": True}
    spec, said, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, train))
    assert reason is None
    settings = {"stage3_max_reuse_distance": 1e9, "stage3_param_persistence_threshold": 1e5,
                "reduce_bucket_size": 5e8, "sub_group_size": 1e9}
    assert spec["zero"] == {"stage": 3, "world": 1, "offload_params": True, "offload_optimizer": True,
                            "settings": settings}
    assert any(n.startswith("ZeRO-3, optimizer on the host") and n.endswith("from DeepSpeed's defaults") for n in said)
    # The optimizer on the GPU, sharded over four: its fp32 share and sub-groups are simulated too.
    spec, said, reason, _ = _read(_profile(tmp_path, LLAMA_SHAPE, {"zero_stage": 3}, {"nproc_per_node": 4}))
    assert reason is None
    assert spec["zero"] == {"stage": 3, "world": 4, "offload_params": False, "offload_optimizer": False,
                            "settings": settings}
    assert any(n.startswith("ZeRO-3, optimizer on the GPU (the fp32 share of 4)") for n in said)
