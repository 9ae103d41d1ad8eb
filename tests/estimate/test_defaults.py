"""A profile silent about dropout, LoRA dropout or LoRA targets is estimated with the model's config,
its family's framework default or the more expensive reading — never the cheapest case — and the
notes say which."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoc.estimate import estimate
from gpudoc.estimate.inputs import inputs_from_profile
from gpudoc.profiles.model import Profile

GPT2_SHAPE = {"hidden": 768, "layers": 12, "heads": 12, "ffn": 3072, "vocab": 50257, "tied_embeddings": True}
LLAMA_SHAPE = {"hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 32, "ffn": 11008, "vocab": 32000}
T5_SHAPE = {"arch": "encoder-decoder", "hidden": 1024, "layers": 48, "heads": 16, "ffn": 2816, "vocab": 32128}
TRAIN = {"micro_batch_size": 4, "max_seq_len": 1024, "precision": "bf16"}


def _profile(tmp_path: Path, model: dict, train: dict | None = None) -> Profile:
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    return Profile(name="p", path=path, chain=(path,), model=model, train={**TRAIN, **(train or {})})


def _note(notes, text: str) -> str:
    found = [n for n in notes if text in n]
    assert found, notes
    return found[0]


def test_a_framework_whose_own_model_code_has_no_dropout_is_estimated_without(tmp_path):
    """LitGPT's GPT and torchtune's decoders have no dropout on their blocks: a profile that names the
    framework ([bind] args, or a job read from its command) is not given the family's 0.1."""
    path = tmp_path / "gpudoc.toml"
    path.write_text("")
    for framework in ("litgpt", "torchtune"):
        named = Profile(name="p", path=path, chain=(path,), model=GPT2_SHAPE, train=TRAIN, bind={"args": framework})
        inputs = inputs_from_profile(named)
        assert inputs.setup.dropout == 0.0
        assert f"none assumed, as {framework}'s own model code has none" in _note(inputs.notes, "dropout not set")
    hf = Profile(name="p", path=path, chain=(path,), model=GPT2_SHAPE, train=TRAIN, bind={"args": "hf-trainer"})
    assert inputs_from_profile(hf).setup.dropout == 0.1


def test_a_litgpt_job_silent_about_its_loss_is_estimated_with_litgpts_own(tmp_path):
    """LitGPT's finetune scripts compute the head in chunks that Fabric hands back in fp32 and hold them
    through backward (``loss = "fp32_chunks"``): a profile naming LitGPT gets that loss and a note; one
    that states its loss keeps it, and another framework's job the full-vocabulary loss."""
    path = tmp_path / "gpudoc.toml"
    path.write_text("")

    def read(train: dict, framework: str):
        return inputs_from_profile(Profile(name="p", path=path, chain=(path,), model=LLAMA_SHAPE,
                                           train={**TRAIN, **train}, bind={"args": framework}))

    litgpt = read({}, "litgpt")
    assert litgpt.setup.loss == "fp32_chunks"
    assert "litgpt's own" in _note(litgpt.notes, "[train] loss not set")
    stated = read({"loss": "lm"}, "litgpt")
    assert stated.setup.loss == "lm" and not any("loss not set" in n for n in stated.notes)
    assert read({}, "hf-trainer").setup.loss == "lm"


def test_a_layernorm_gelu_family_trains_with_dropout_unless_told(tmp_path):
    silent = estimate(_profile(tmp_path, GPT2_SHAPE))
    assert "framework default" in _note(silent.notes, "[train] dropout not set: 0.1 assumed")
    without = estimate(_profile(tmp_path, GPT2_SHAPE, {"dropout": 0.0}))
    # The masks (1 B) and outputs of every dropout are stored: the silent profile costs more.
    assert silent.breakdown["activations"] > without.breakdown["activations"] * 1.05
    assert not any("dropout not set" in n for n in without.notes)


def test_llama_style_blocks_and_encoder_decoders_take_their_family_default(tmp_path):
    llama = inputs_from_profile(_profile(tmp_path, LLAMA_SHAPE))
    assert llama.setup.dropout == 0.0
    _note(llama.notes, "none assumed, as Llama-style blocks")
    t5 = inputs_from_profile(_profile(tmp_path, T5_SHAPE))
    assert t5.setup.dropout == 0.1


def test_the_model_config_decides_when_it_states_dropout_even_zero(tmp_path):
    phi = {"model_type": "phi", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32,
           "intermediate_size": 8192, "vocab_size": 51200, "hidden_act": "gelu_new", "layer_norm_eps": 1e-5,
           "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0}
    (tmp_path / "config.json").write_text(json.dumps(phi))
    inputs = inputs_from_profile(_profile(tmp_path, {"hf_config": "config.json"}))
    # A LayerNorm/GELU model, but its config turns dropout off: the config wins over the family.
    assert inputs.setup.dropout == 0.0
    _note(inputs.notes, "as the model's config.json states")
    (tmp_path / "config.json").write_text(json.dumps({**phi, "resid_pdrop": 0.1}))
    assert inputs_from_profile(_profile(tmp_path, {"hf_config": "config.json"})).setup.dropout == 0.1


def test_lora_dropout_is_assumed_on_and_the_targets_said(tmp_path):
    lora = {"lora_rank": 16, "precision": "bf16-true"}
    silent = estimate(_profile(tmp_path, LLAMA_SHAPE, lora))
    _note(silent.notes, "lora_dropout not set")
    _note(silent.notes, "lora_targets not set: peft's default for llama, as a profile of shapes is read: q_proj, v_proj")
    off = estimate(_profile(tmp_path, LLAMA_SHAPE, {**lora, "lora_dropout": 0.0}))
    # Each adapter's dropout keeps a mask and a copy of its input: more than the LoRA-free reading.
    assert silent.breakdown["activations"] > off.breakdown["activations"]
    assert not any("lora_dropout not set" in n for n in off.notes)
