"""Each family's config.json as the [model] table: the shapes the estimator needs, and a parameter
count that matches the real model class built from the same file (transformers, on the meta device)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

from gpudoc.errors import ProfileError
from gpudoc.estimate import estimate
from gpudoc.estimate.hf_config import model_from_hf_config
from gpudoc.estimate.inputs import inputs_from_profile, params_from_shapes
from gpudoc.profiles.model import Profile
from tests.estimate.hf_configs import CONFIGS

TRAIN = {"micro_batch_size": 1, "max_seq_len": 1024, "precision": "bf16"}
STATE_SPACE = ("state-spaces/mamba-130m-hf", "mistralai/Mamba-Codestral-7B-v0.1")
# transformers 5 ties T5's lm_head whatever the file says (T5Config forces tie_word_embeddings);
# the checkpoint, and transformers 4, keep flan-T5's separate head: 247,577,856 tensors' elements.
PUBLISHED = {"google/flan-t5-base": 247_577_856}


def _write(tmp_path: Path, model_id: str) -> Path:
    directory = tmp_path / model_id.replace("/", "--")
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(CONFIGS[model_id]))
    return directory


def _real_params(directory: Path) -> int:
    """What the family's own model class holds when built from this config.json."""
    config = AutoConfig.from_pretrained(directory)
    family = config.model_type
    auto = (AutoModelForSeq2SeqLM if config.is_encoder_decoder
            else AutoModelForMaskedLM if family in ("bert", "roberta") else AutoModelForCausalLM)
    with torch.device("meta"):
        model = auto.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _profile(directory: Path) -> Profile:
    return Profile(name="p", model={"hf_config": str(directory)}, train=TRAIN)


@pytest.mark.parametrize("model_id", [m for m in CONFIGS if m not in STATE_SPACE])
def test_parameter_count_matches_the_model_class(tmp_path, model_id):
    directory = _write(tmp_path, model_id)
    shape = inputs_from_profile(_profile(directory)).shape
    real = PUBLISHED.get(model_id) or _real_params(directory)
    # Biases, position embeddings and an encoder's pooler/MLM transform are left out: ~1% at most.
    assert abs(shape.params - real) / real < 0.012, (shape, real)


@pytest.mark.parametrize("model_id", STATE_SPACE)
def test_state_space_models_are_counted_and_named_not_estimated(tmp_path, model_id):
    directory = _write(tmp_path, model_id)
    mapped = model_from_hf_config(CONFIGS[model_id])
    assert mapped["params"] == _real_params(directory)  # the mixer's layout, element for element
    assert mapped["arch"] == "state-space" and "heads" not in mapped
    with pytest.raises(ProfileError, match=r"a Mamba(-2)? model: the estimate's formula covers transformer blocks"):
        inputs_from_profile(_profile(directory))


def test_explicit_head_dim_shapes_attention_wider_than_hidden(tmp_path):
    # Gemma-7B: 16 heads x 256 = 4096 query width over a 3072 hidden size.
    shape = inputs_from_profile(_profile(_write(tmp_path, "google/gemma-7b"))).shape
    assert (shape.hidden, shape.heads, shape.head_dim, shape.attention_width) == (3072, 16, 256, 4096)
    assert shape.gated_mlp and shape.tied_embeddings and shape.norm == "rmsnorm"
    narrower = inputs_from_profile(Profile(name="p", train=TRAIN, model={
        "hf_config": str(tmp_path / "google--gemma-7b"), "head_dim": 192})).shape
    assert narrower.attention_width == 3072 and narrower.params < shape.params  # the profile's key wins


def test_family_defaults_the_config_leaves_out():
    gpt2 = model_from_hf_config(CONFIGS["gpt2"])  # n_inner absent: 4 x n_embd; lm_head tied
    assert (gpt2["hidden"], gpt2["layers"], gpt2["heads"], gpt2["ffn"]) == (768, 12, 12, 3072)
    assert gpt2["tied_embeddings"] and gpt2["_gated"] is False and gpt2["_dropout"] == 0.1
    bloom = model_from_hf_config({k: v for k, v in CONFIGS["bigscience/bloom-560m"].items() if k != "hidden_size"}
                                 | {"n_embed": 1024})  # the older spelling of BLOOM's width
    assert (bloom["hidden"], bloom["heads"], bloom["ffn"], bloom["tied_embeddings"]) == (1024, 16, 4096, True)
    falcon = model_from_hf_config(CONFIGS["tiiuae/falcon-7b"])  # multi-query: one K/V head
    assert (falcon["heads"], falcon["kv_heads"], falcon["ffn"], falcon["tied_embeddings"]) == (71, 1, 18176, True)
    falcon40 = model_from_hf_config(CONFIGS["tiiuae/falcon-40b"])  # the new decoder: grouped K/V heads
    assert (falcon40["heads"], falcon40["kv_heads"]) == (128, 8)
    neox = model_from_hf_config(CONFIGS["EleutherAI/pythia-160m"])
    assert neox["tied_embeddings"] is False and neox["_norm"] == "layernorm"
    llama = model_from_hf_config({k: v for k, v in CONFIGS["mistralai/Mistral-7B-v0.1"].items()
                                  if k != "tie_word_embeddings"})
    assert llama["tied_embeddings"] is False and llama["_gated"] is True


def test_encoder_decoder_and_encoder_families():
    t5 = model_from_hf_config(CONFIGS["t5-3b"])  # relu MLP 16 x d_model: not mistaken for a gated one
    assert t5["arch"] == "encoder-decoder" and (t5["encoder_layers"], t5["decoder_layers"], t5["layers"]) == (24, 24, 48)
    assert t5["_gated"] is False and t5["head_dim"] == 128 and t5["_norm"] == "rmsnorm" and t5["tied_embeddings"]
    flan = model_from_hf_config(CONFIGS["google/flan-t5-base"])
    assert flan["_gated"] is True and flan["tied_embeddings"] is False and flan["decoder_layers"] == 12
    bert = model_from_hf_config(CONFIGS["bert-base-uncased"])
    assert bert["arch"] == "encoder" and bert["tied_embeddings"] and bert["vocab"] == 30522


def test_opt_embedding_projection_is_counted():
    opt = model_from_hf_config(CONFIGS["facebook/opt-350m"])
    assert opt["ffn"] == 4096 and opt["_gated"] is False
    # Embeddings of 512 projected to 1024: the plain vocab x hidden count would be 25M too many.
    assert opt["params"] < 330e6


@pytest.mark.parametrize("model_id, experts, top_k, active_ffn", [
    ("mistralai/Mixtral-8x7B-v0.1", 8, 2, 2 * 14336),
    ("Qwen/Qwen1.5-MoE-A2.7B", 60, 4, 4 * 1408 + 5632),
    ("Qwen/Qwen3-30B-A3B", 128, 8, 8 * 768),
])
def test_mixture_of_experts_counts_every_expert_and_activates_top_k(tmp_path, model_id, experts, top_k, active_ffn):
    inputs = inputs_from_profile(_profile(_write(tmp_path, model_id)))
    assert inputs.shape.ffn == active_ffn and inputs.shape.gated_mlp
    assert inputs.shape.params > 2 * params_from_shapes(inputs.shape)  # all experts, not the active ones
    assert any(f"{experts} experts, {top_k} per token" in note for note in inputs.notes)
    assert not any("but the shapes give" in note for note in inputs.notes)
    # Weights, gradients and AdamW states of all 46.7B Mixtral parameters: far beyond the active 13B.
    result = estimate(_profile(tmp_path / model_id.replace("/", "--")))
    assert result.breakdown["weights"] >= 2 * inputs.shape.params * 0.99


def test_qlora_quantizes_every_expert(tmp_path):
    # Mixtral-8x7B in NF4: ~0.52 B for each of its ~46B block parameters, not only the 2 experts of 8
    # a token passes through (which would leave 34B idle expert weights in bf16: 68 GB more).
    profile = Profile(name="p", model={"hf_config": str(_write(tmp_path, "mistralai/Mixtral-8x7B-v0.1"))},
                      train={**TRAIN, "quantization": "nf4", "lora_rank": 16})
    weights = estimate(profile).breakdown["weights"]
    params = inputs_from_profile(profile).shape.params
    assert 0.5 * params < weights < 0.56 * params + 2 * 32000 * 4096 * 2


@pytest.mark.parametrize("field, value", [("hidden_size", "big"), ("num_attention_heads", 0), ("vocab_size", -5),
                                          ("num_hidden_layers", True)])
def test_a_shape_the_config_states_wrongly_is_named_not_read_as_missing(tmp_path, field, value):
    config = {**CONFIGS["meta-llama/Llama-3.2-1B"], field: value}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ProfileError, match=rf"config.json: {field} = {json.dumps(value)}: expected a positive number") \
            as raised:
        inputs_from_profile(_profile(tmp_path))
    assert (raised.value.file, raised.value.key) == (str(tmp_path / "config.json"), field)


def test_null_in_a_config_is_unset_not_wrong(tmp_path):
    config = {**CONFIGS["meta-llama/Llama-3.2-1B"], "head_dim": None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert inputs_from_profile(_profile(tmp_path)).shape.hidden == config["hidden_size"]
