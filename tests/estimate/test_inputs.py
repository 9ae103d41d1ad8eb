"""Profile and config.json inputs, and the errors for what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoc.errors import ProfileError
from gpudoc.estimate import estimate, estimate_with, per_sample_activation_bytes
from gpudoc.estimate.hf_config import model_from_hf_config
from gpudoc.estimate.inputs import inputs_from_profile, params_from_shapes
from gpudoc.profiles.model import Profile

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
    "hidden_act": "silu", "rms_norm_eps": 1e-5,
}
TRAIN = {"micro_batch_size": 1, "max_seq_len": 2048, "precision": "bf16-true"}


def _profile(tmp_path: Path, model: dict, train: dict | None = None, **kw) -> Profile:
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    return Profile(name="p", path=path, chain=(path,), model=model, train=train or TRAIN, **kw)


def test_hf_config_maps_shapes_and_params_come_from_them(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    inputs = inputs_from_profile(_profile(tmp_path, {"hf_config": "config.json"}))
    shape = inputs.shape
    assert (shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.ffn, shape.vocab) == \
        (4096, 32, 32, 8, 14336, 128256)
    assert shape.gated_mlp and not shape.tied_embeddings
    assert abs(shape.params - 8_030_261_248) / 8_030_261_248 < 0.001  # Llama-3.1-8B's published count


def test_profile_keys_override_the_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    inputs = inputs_from_profile(_profile(tmp_path, {"hf_config": "config.json", "layers": 16}))
    assert inputs.shape.layers == 16


def test_gpt2_config_is_plain_mlp_tied_with_dropout():
    mapped = model_from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                   "vocab_size": 50257, "activation_function": "gelu_new", "attn_pdrop": 0.1,
                                   "layer_norm_epsilon": 1e-5})
    assert mapped["hidden"] == 768 and mapped["layers"] == 12 and mapped["_gated"] is False
    assert mapped["tied_embeddings"] is True and mapped["_dropout"] == 0.1 and mapped["_norm"] == "layernorm"


@pytest.mark.parametrize("missing", ["hidden", "layers", "heads", "vocab"])
def test_missing_model_key_names_key_and_table(tmp_path, missing):
    model = {"hidden": 4096, "layers": 32, "heads": 32, "vocab": 32000}
    del model[missing]
    with pytest.raises(ProfileError, match=rf"\[model\] {missing} is missing: set \[model\] hf_config = \"ORG/NAME\" "
                       rf"\(a config.json, its directory, or a model id in the local Hugging Face cache\) or {missing} = N") as raised:
        inputs_from_profile(_profile(tmp_path, model))
    # The JSON envelope's error.file: the profile's own file, beside the key.
    assert (raised.value.file, raised.value.key) == (str(tmp_path / "gpudoc.toml"), f"model.{missing}")


def test_missing_seq_len_and_bad_values_are_profile_errors(tmp_path):
    model = {"hidden": 4096, "layers": 32, "heads": 32, "vocab": 32000}
    with pytest.raises(ProfileError, match=r"\[train\] max_seq_len is missing") as raised:
        inputs_from_profile(_profile(tmp_path, model, {"micro_batch_size": 1}))
    assert raised.value.file == str(tmp_path / "gpudoc.toml")
    with pytest.raises(ProfileError, match="hidden = 4096 is not a multiple of heads = 30"):
        inputs_from_profile(_profile(tmp_path, {**model, "heads": 30}))
    with pytest.raises(ProfileError, match="hf_config = \"nope.json\": no such file beside"):
        inputs_from_profile(_profile(tmp_path, {"hf_config": "nope.json"}))
    with pytest.raises(ProfileError, match="lora_targets: unknown layer 'qq'"):
        inputs_from_profile(_profile(tmp_path, {**model, "lora_targets": ["qq"]}, {**TRAIN, "lora_rank": 8}))


def test_plain_mlp_is_recognised_from_the_parameter_count(tmp_path):
    # GPT-2 small: ffn = 4h, tied embeddings, 124M parameters.
    model = {"hidden": 768, "layers": 12, "heads": 12, "vocab": 50257, "params": 124e6, "ffn": 3072}
    inputs = inputs_from_profile(_profile(tmp_path, model))
    assert not inputs.shape.gated_mlp
    assert abs(params_from_shapes(inputs.shape) - 124e6) / 124e6 < 0.05


def test_world_size_from_launch_and_gpu_capacity_from_the_profile(tmp_path):
    model = {"hidden": 4096, "layers": 32, "heads": 32, "vocab": 32000, "ffn": 11008}
    profile = _profile(tmp_path, model, {**TRAIN, "zero_stage": 3}, launch={"nproc_per_node": 4},
                       gpu={"memory_gib": 24})
    result = estimate(profile)
    assert result.inputs["world_size"] == 4
    assert result.gpu_total_bytes == 24 * 1024**3
    assert result.max_micro_batch_size is not None


def test_ladder_helpers_change_knobs_and_per_sample_is_the_slope(tmp_path):
    model = {"hidden": 4096, "layers": 32, "heads": 32, "vocab": 32000, "ffn": 11008}
    profile = _profile(tmp_path, model)
    base = estimate(profile)
    checkpointed = estimate_with(profile, {"gradient_checkpointing": [False, True]})
    # Full fine-tune with AdamW: the optimizer step is the peak, which checkpointing cannot lower.
    assert checkpointed.peak_bytes == base.peak_bytes
    assert checkpointed.phases["forward_backward"] < base.phases["forward_backward"]
    two = estimate(profile.with_train({"micro_batch_size": 2}))
    slope = per_sample_activation_bytes(profile)
    assert abs((two.phases["forward_backward"] - base.phases["forward_backward"]) - slope) <= 2
