"""Which 4-bit layers the model is built with: the job's interpreter decides."""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpudoc.simhelper.build import build  # noqa: E402
from gpudoc.simhelper.kbit import Linear4bit, LinearNF4  # noqa: E402

# bin/test installs torchtune's torchao beside the venv (peft refuses that version in the venv itself).
TORCHAO = Path(sys.executable).parent.parent / "torchtune-torchao"
SPEC = {"hf_config": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
                      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100},
        "arch": "decoder", "seq_len": 16, "micro_batch_sizes": [1], "precision": "bf16-true",
        "gradient_checkpointing": "none", "quantization": "nf4"}


def _layers(model) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, torch.nn.Linear)}


@pytest.mark.skipif(find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed here")
def test_nf4_is_torchtunes_where_the_interpreter_has_torchtune_and_torchao_and_no_bitsandbytes(monkeypatch):
    if find_spec("torchtune") is None or not (TORCHAO / "torchao").is_dir():
        pytest.skip("torchtune or its torchao is not installed")
    without = build(dict(SPEC))  # torchao is not importable from the venv itself
    assert Linear4bit in _layers(without.model) and LinearNF4 not in _layers(without.model)
    monkeypatch.syspath_prepend(str(TORCHAO))
    job = build(dict(SPEC))
    assert LinearNF4 in _layers(job.model) and Linear4bit not in _layers(job.model)
    assert any(n.startswith("4-bit: 7 linear layers as torchtune's NF4") for n in job.notes), job.notes


@pytest.mark.parametrize(("adapters", "dtype"), [("peft", torch.float32), ("own", torch.bfloat16)])
def test_lora_adapters_are_fp32_as_peft_keeps_them_or_in_the_models_dtype_as_a_frameworks_own(adapters, dtype):
    """peft upcasts the adapters of a bf16 model to fp32 (``autocast_adapter_dtype``); torchtune's and
    LitGPT's own LoRA layers stay bf16, which the simulation builds as peft's without that cast."""
    pytest.importorskip("peft")
    spec = {**SPEC, "quantization": "none", "lora": {"rank": 4, "dropout": 0.0, "adapters": adapters,
                                                      "target_names": ["q_proj", "v_proj"]}}
    job = build(spec)
    trained = {p.dtype for p in job.model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in job.model.parameters() if not p.requires_grad}
    assert trained == {dtype} and frozen == {torch.bfloat16}
    assert any(n.startswith("LoRA rank 4 on q_proj, v_proj, adapters in") for n in job.notes), job.notes


def test_a_classification_job_is_built_with_a_sequence_classifiers_head():
    """``loss = "classification"``: transformers' sequence classifier (no vocabulary-sized logits), one
    label a sample, where an encoder is otherwise built with its masked-LM head."""
    config = {"model_type": "bert", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 4, "vocab_size": 100}
    spec = {**SPEC, "hf_config": config, "arch": "encoder", "precision": "fp32", "quantization": "none"}
    assert type(build(dict(spec)).model).__name__ == "BertForMaskedLM"
    job = build({**spec, "loss": "classification"})
    assert type(job.model).__name__ == "BertForSequenceClassification"
    assert tuple(job.make_batch(3)["labels"].shape) == (3,)


def _gpt2(layers: int) -> dict:
    # Dropout off: CPU's dropout saves a mask of its input's dtype, CUDA's (and the emulation's) a bool.
    return {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": layers, "n_positions": 32, "vocab_size": 100,
            "activation_function": "gelu", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "use_cache": True}


def _saved_on_cpu(layers: int) -> int:
    """Ground truth: the bytes of the distinct storages autograd saves in a real fp32 forward of the model
    the HF Trainer trains (``model.config.use_cache = args.use_cache``, False by default)."""
    import transformers

    config = transformers.AutoConfig.for_model(**{**_gpt2(layers), "use_cache": False})
    from tests.estimate.test_model import saved_bytes

    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").train()
    ids = torch.randint(0, 100, (1, 32))
    return saved_bytes(model, input_ids=ids, labels=ids)


def _live_after_simulated_forward(layers: int) -> int:
    from gpudoc.simhelper.emulate import Emulation
    from gpudoc.simhelper.tracker import LiveBytes

    spec = {**SPEC, "hf_config": _gpt2(layers), "seq_len": 32, "precision": "fp32", "quantization": "none",
            "attention": "eager"}
    job = build(spec)
    tracker, emulation = LiveBytes(), Emulation()
    with tracker, emulation.installed():
        for tensor in (*job.model.parameters(), *job.model.buffers()):  # the weights are no activation
            tracker.track(tensor)
        batch = job.make_batch(1)
        start = tracker.live
        out = job.model(**batch)
        live = tracker.live - start
        del out
    return live


def test_a_gpt2_block_is_simulated_with_what_autograd_saves_in_training_and_no_key_value_cache():
    """One GPT-2 block at micro batch 1 (q, k and v views of c_attn's output): the simulated forward
    holds what a real CPU forward saves for backward, not transformers' DynamicCache copies of every
    layer's keys and values that ``use_cache`` (config.json's True) would add."""
    truth = _saved_on_cpu(2) - _saved_on_cpu(1)
    simulated = _live_after_simulated_forward(2) - _live_after_simulated_forward(1)
    unit = 32 * 64 * 4  # one token-by-hidden fp32 tensor; the cache held two a layer
    assert truth > 10 * unit
    assert simulated == pytest.approx(truth, abs=unit / 2)  # the layer norms' statistics rounded to 512 B blocks


@pytest.mark.parametrize(("version", "cached"), [("5.0.0", False), ("4.57.1", True)])
def test_the_key_value_cache_is_what_the_installed_transformers_trainer_leaves_on(monkeypatch, version, cached):
    """transformers 5's Trainer turns config.json's use_cache off for training (TrainingArguments.use_cache,
    False); an older one left it as the config says, and its model built the cache in training."""
    import transformers

    monkeypatch.setattr(transformers, "__version__", version)
    spec = {**SPEC, "hf_config": _gpt2(1), "seq_len": 32, "precision": "fp32", "quantization": "none"}
    assert build(spec).model.config.use_cache is cached
