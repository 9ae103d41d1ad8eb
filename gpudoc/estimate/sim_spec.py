"""What the simulation helper is told about the job: a JSON spec built from the profile, and the
reasons a job cannot be simulated faithfully (the formula answers those, saying why)."""

from __future__ import annotations

from typing import Any

from gpudoc.estimate.hf_config import read_hf_config
from gpudoc.estimate.inputs import ModelShape, TrainSetup, n_blocks
from gpudoc.estimate.lora_targets import target_names


def unsupported_reason(profile: Any, setup: TrainSetup) -> str | None:
    """Why this job cannot be simulated on meta tensors, or None when it can."""
    if setup.quantization != "none":
        return (f"quantization = \"{setup.quantization}\": bitsandbytes/torchao 4- and 8-bit kernels have no "
                "meta implementation")
    if setup.sharding_stage > 0:
        return f"{'FSDP' if setup.fsdp and not setup.zero_stage else f'ZeRO-{setup.sharding_stage}'} sharding " \
               "across GPUs is not simulated"
    for key in ("tensor_parallel", "pipeline_parallel", "context_parallel"):
        if int(profile.launch.get(key) or 1) > 1:
            return f"[launch] {key} = {profile.launch[key]}: tensor/pipeline/context parallelism is not simulated"
    if setup.offload_optimizer or setup.offload_params:
        return "CPU offload is not simulated"
    if setup.optimizer in ("adamw_8bit", "lion"):
        return f"optimizer = \"{setup.optimizer}\": its states live in custom CUDA kernels (bitsandbytes)"
    if setup.optimizer_in_backward:
        return "an optimizer that steps inside backward is the job's own code"
    if setup.loss != "lm":
        return f"loss = \"{setup.loss}\": the job's own loss code"
    if setup.gradient_checkpointing == "selective" and not profile.model.get("factory"):
        return ("selective checkpointing: the policy is the job's own code (transformers has no switch for it; "
                "a [model] factory that takes gradient_checkpointing applies it)")
    return None


def _config_from_shape(shape: ModelShape, setup: TrainSetup) -> dict:
    """A config.json for a profile that gives only shapes: Llama for gated-MLP/RMSNorm decoders,
    GPT-2 (with its dropout, the family's default) for GELU/LayerNorm ones, BERT for encoders, T5
    (v1.1: gated GELU when the MLP is gated) for encoder-decoders."""
    if shape.arch == "encoder-decoder":
        plain, cross = n_blocks(shape)
        return {"model_type": "t5", "d_model": shape.hidden, "d_ff": shape.ffn, "d_kv": shape.head_dim,
                "num_layers": plain, "num_decoder_layers": cross, "num_heads": shape.heads,
                "vocab_size": shape.vocab, "feed_forward_proj": "gated-gelu" if shape.gated_mlp else "relu",
                "tie_word_embeddings": shape.tied_embeddings, "decoder_start_token_id": 0}
    if shape.arch == "encoder":
        return {"model_type": "bert", "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
                "num_attention_heads": shape.heads, "intermediate_size": shape.ffn, "vocab_size": shape.vocab,
                "max_position_embeddings": max(512, setup.seq_len)}
    if shape.gated_mlp or shape.norm == "rmsnorm":
        return {"model_type": "llama", "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
                "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
                "intermediate_size": shape.ffn, "vocab_size": shape.vocab,
                "tie_word_embeddings": shape.tied_embeddings, "max_position_embeddings": max(2048, setup.seq_len)}
    return {"model_type": "gpt2", "n_embd": shape.hidden, "n_layer": shape.layers, "n_head": shape.heads,
            "n_inner": shape.ffn, "vocab_size": shape.vocab, "n_positions": max(1024, setup.seq_len),
            "tie_word_embeddings": True}


def simulation_spec(profile: Any, shape: ModelShape | None, setup: TrainSetup, sizes: list[int]) -> tuple[dict, list[str]]:
    """The helper's spec for micro batch ``sizes`` (the first is the one the estimate is for), and
    notes on what was assumed."""
    notes: list[str] = []
    spec: dict[str, Any] = {
        "micro_batch_sizes": [int(b) for b in sizes],
        "seq_len": setup.seq_len,
        "precision": setup.precision,
        "optimizer": setup.optimizer,
        "momentum": setup.momentum,
        "gradient_checkpointing": setup.gradient_checkpointing,
        "attention": setup.attention,
        "gradient_accumulation_steps": setup.gradient_accumulation_steps,
        "arch": shape.arch if shape is not None else str(profile.model.get("arch") or "decoder"),
    }
    target = profile.train.get("max_target_len")
    if target:
        spec["target_len"] = int(target)
    if setup.lora_rank:
        explicit = profile.model.get("lora_targets") or profile.train.get("lora_targets")
        spec["lora"] = {"rank": setup.lora_rank, "dropout": setup.lora_dropout,
                        "target_names": target_names(setup.lora_targets) if explicit else None}
    factory = profile.model.get("factory")
    if factory:
        spec["factory"] = str(factory)
    elif profile.model.get("hf_config"):
        spec["hf_config"] = read_hf_config(profile, str(profile.model["hf_config"]))
    elif shape is not None:
        spec["hf_config"] = _config_from_shape(shape, setup)
        notes.append(f"no config.json: simulated as a {spec['hf_config']['model_type']} model of the profile's shapes")
    return spec, notes
