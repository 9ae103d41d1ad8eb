"""What the simulation helper is told about the job: a JSON spec built from the profile, and the
reasons a job cannot be simulated faithfully (the formula answers those, saying why)."""

from __future__ import annotations

from typing import Any

from gpudoc.estimate import megatron, zero3, zero_settings
from gpudoc.estimate.defaults import shapes_family
from gpudoc.estimate.hf_config import read_hf_config, with_dropout
from gpudoc.estimate.inputs import ModelShape, TrainSetup, n_blocks


def unsupported_reason(profile: Any, setup: TrainSetup, shape: ModelShape | None = None) -> str | None:
    """Why this job cannot be simulated on meta tensors, or None when it can."""
    if megatron.runs(setup):
        return ("a Megatron-LM job: its DDP's grad buffer and its mixed-precision optimizer are its own code, "
                "not simulated (the formula counts them: ``megatron``)")
    if setup.quantization not in ("none", "nf4"):
        return (f"quantization = \"{setup.quantization}\": torchao's and bitsandbytes' 8-bit kernels have no meta "
                "implementation (NF4 layers, bitsandbytes' and torchtune's, have a stand-in)")
    if setup.quantization == "nf4" and profile.model.get("factory"):
        return "quantization = \"nf4\" with a [model] factory: the factory's own code quantizes its model"
    if (setup.fsdp or setup.sharding_stage > 2) and not zero3.runs(setup):
        return f"{'FSDP' if setup.fsdp and not setup.zero_stage else f'ZeRO-{setup.sharding_stage}'} sharding " \
               "across GPUs is not simulated (ZeRO-1 and ZeRO-2 are)"
    if (zero_sharded(setup) or zero3.runs(setup)) and setup.quantization != "none":
        return f"ZeRO-{setup.zero_stage} with quantization = \"{setup.quantization}\": DeepSpeed's engine would cast " \
               "the quantized layers it is given"
    for key in ("tensor_parallel", "pipeline_parallel", "context_parallel"):
        if int(profile.launch.get(key) or 1) > 1:
            return f"[launch] {key} = {profile.launch[key]}: tensor/pipeline/context parallelism is not simulated"
    if (setup.offload_params or (setup.offload_optimizer and not zero_sharded(setup))) and not zero3.runs(setup):
        return "CPU offload is not simulated (DeepSpeed ZeRO-3's is, and ZeRO-1/2's offload_optimizer)"
    if setup.optimizer in ("adamw_8bit", "lion"):
        return f"optimizer = \"{setup.optimizer}\": its states live in custom CUDA kernels (bitsandbytes)"
    if setup.optimizer_in_backward:
        return "an optimizer that steps inside backward is the job's own code"
    if setup.compiled and setup.gradient_checkpointing == "none":
        return ("compile = true without checkpointing: each compiled block keeps what torch.compile's partition "
                "saves, not what eager autograd does on meta tensors (``compiled``)")
    # transformers' own heads: the LM's, a sequence classifier's (AutoModelForSequenceClassification). A
    # factory's step computes its own loss: its framework's where the profile names none (``framework_loss``).
    framework_own = bool(profile.model.get("factory")) and profile.train.get("loss") is None
    if not framework_own and (setup.loss not in ("lm", "fp32_logits", "classification")
                              or (setup.loss != "lm" and profile.model.get("factory"))):
        hint = " (a [model] factory that runs the job's step is simulated with it)" \
            if setup.loss == "fp32_chunks" and not profile.model.get("factory") else ""
        return f"loss = \"{setup.loss}\": the job's own loss code{hint}"
    if setup.gradient_checkpointing == "selective" and not profile.model.get("factory"):
        return ("selective checkpointing: the policy is the job's own code (transformers has no switch for it; "
                "a [model] factory that takes gradient_checkpointing applies it)")
    if shape is not None and not (profile.model.get("factory") or profile.model.get("hf_config")):
        return shapes_reason(shape, setup)
    return None


def zero_sharded(setup: TrainSetup) -> bool:
    """DeepSpeed ZeRO-1/2 over more than one data-parallel rank: simulated as one rank's share."""
    return setup.zero_stage in (1, 2) and not setup.fsdp and setup.world_size > 1


def shapes_reason(shape: ModelShape, setup: TrainSetup) -> str | None:
    """Why a profile that gives only shapes cannot be simulated as what it says, or None: the class
    it is built as (``defaults.shapes_family``) must hold the profile's attention layout and dropout."""
    family = shapes_family(shape)
    where = f"[model] gives shapes and no hf_config: the {family} class it is simulated as"
    if family == "t5" and not shape.gated_mlp:
        return f"{where} has RMSNorm blocks, not this plain-MLP encoder-decoder's LayerNorm"
    if family in ("gpt2", "bert") and shape.gated_mlp:
        return f"{where} has no gated MLP"
    if family in ("gpt2", "bert", "t5") and shape.kv_heads != shape.heads:
        return f"{where} has no grouped K/V heads (kv_heads = {shape.kv_heads} of {shape.heads})"
    if family in ("gpt2", "bert") and shape.attention_width != shape.hidden:
        return f"{where} has no head_dim of its own (heads x head_dim = hidden)"
    if family == "llama" and setup.dropout > 0:
        return f"{where} has no dropout on its residual stream ([train] dropout = {setup.dropout:g})"
    return None


def _config_from_shape(shape: ModelShape, setup: TrainSetup) -> tuple[dict, str]:
    """A config.json of the profile's shapes, of the class ``shapes_family`` names, with the setup's
    dropout; and the note that says what was simulated."""
    p = setup.dropout
    family = shapes_family(shape)
    said = f"no config.json: simulated as a {family} model of the profile's shapes"
    if family == "t5":
        plain, cross = n_blocks(shape)
        return {"model_type": "t5", "d_model": shape.hidden, "d_ff": shape.ffn, "d_kv": shape.head_dim,
                "num_layers": plain, "num_decoder_layers": cross, "num_heads": shape.heads,
                "vocab_size": shape.vocab, "feed_forward_proj": "gated-gelu", "dropout_rate": p,
                "tie_word_embeddings": shape.tied_embeddings, "decoder_start_token_id": 0}, \
            f"{said} (gated GELU, dropout {p:g})"
    if family == "bert":
        return {"model_type": "bert", "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
                "num_attention_heads": shape.heads, "intermediate_size": shape.ffn, "vocab_size": shape.vocab,
                "max_position_embeddings": max(512, setup.seq_len), "hidden_act": "gelu",
                "hidden_dropout_prob": p, "attention_probs_dropout_prob": p,
                "tie_word_embeddings": shape.tied_embeddings}, f"{said} (GELU, dropout {p:g})"
    if family == "llama":
        config = {"model_type": "llama", "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
                  "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
                  "head_dim": shape.head_dim, "intermediate_size": shape.ffn, "vocab_size": shape.vocab,
                  "tie_word_embeddings": shape.tied_embeddings, "max_position_embeddings": max(2048, setup.seq_len)}
        return config, f"{said} (RMSNorm, SwiGLU, {shape.kv_heads} K/V heads of {shape.heads}, no dropout)"
    # An MLP activation the profile cannot name is read as the formula reads it: one fused GELU
    # (GPT-2's own default, gelu_new, is a composed tanh GELU that keeps three more tensors).
    return {"model_type": "gpt2", "n_embd": shape.hidden, "n_layer": shape.layers, "n_head": shape.heads,
            "n_inner": shape.ffn, "vocab_size": shape.vocab, "n_positions": max(1024, setup.seq_len),
            "activation_function": "gelu", "resid_pdrop": p, "embd_pdrop": p, "attn_pdrop": p,
            "tie_word_embeddings": shape.tied_embeddings}, f"{said} (LayerNorm, a fused GELU, dropout {p:g})"


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
        "quantization": setup.quantization,
        "arch": shape.arch if shape is not None else str(profile.model.get("arch") or "decoder"),
        # The job's PyTorch release's defaults ([estimate] torch), where older than the interpreter's.
        "optimizer_impl": setup.stack.optimizer_impl, "zero_grad_frees": setup.stack.zero_grad_frees,
    }
    if setup.stack.torchao is not None:  # [estimate] torchao: how the job's torchao quantizes at load
        spec["torchao"] = "{}.{}".format(*setup.stack.torchao)
    if setup.loss in ("fp32_logits", "classification"):  # the model's logits upcast, then torch's cross-entropy
        spec["loss"] = setup.loss  # (torchtune's); or a sequence classifier's head in place of the LM's
    elif setup.loss == "lm" and not setup.loss_upcast and not profile.model.get("factory"):
        spec["loss"] = "half_logits"  # torch's cross-entropy on the logits as the model returns them
    hidden = shape.hidden if shape is not None else 0
    if zero_sharded(setup):
        z = zero_settings.settings(setup.zero_settings, hidden, setup.zero_stage)
        spec["zero"] = {"stage": setup.zero_stage, "world": setup.world_size, "reduce_bucket_size": z.reduce_bucket,
                        "overlap_comm": z.overlap_comm, "contiguous_gradients": z.contiguous_gradients,
                        "offload_optimizer": setup.offload_optimizer}
        notes.append(f"ZeRO-{setup.zero_stage} over {setup.world_size} GPUs: one rank's share"
                     f"{' (the optimizer on the host)' if setup.offload_optimizer else ''} simulated with "
                     f"{zero_settings.describe(setup.zero_settings)}")
    if zero3.runs(setup):  # in DeepSpeed's gather and release order, the optimizer where the job puts it
        z3 = zero_settings.settings(setup.zero_settings, hidden)
        spec["zero"] = {"stage": 3, "world": setup.world_size, "offload_params": setup.offload_params,
                        "offload_optimizer": setup.offload_optimizer,
                        "settings": {"stage3_max_reuse_distance": z3.reuse_distance,
                                     "stage3_param_persistence_threshold": z3.persistence_threshold,
                                     "reduce_bucket_size": z3.reduce_bucket, "sub_group_size": z3.sub_group}}
        where = "on the host" if setup.offload_optimizer else f"on the GPU (the fp32 share of {setup.world_size})"
        notes.append(f"ZeRO-3, optimizer {where}: parameters gathered before each module and released after "
                     f"it as DeepSpeed does, from {zero_settings.describe(setup.zero_settings)}")
    target = profile.train.get("max_target_len")
    if target:
        spec["target_len"] = int(target)
    if setup.lora_rank:
        names = setup.lora_target_names
        spec["lora"] = {"rank": setup.lora_rank, "dropout": setup.lora_dropout, "adapters": setup.lora_adapters,
                        "target_names": list(names) if names is not None else None}
    factory = profile.model.get("factory")
    if factory:
        spec["factory"] = str(factory)
    elif profile.model.get("hf_config"):
        spec["hf_config"] = read_hf_config(profile, str(profile.model["hf_config"]))
        if profile.train.get("dropout") is not None:  # the profile's, as the formula reads it
            spec["hf_config"] = with_dropout(spec["hf_config"], setup.dropout)
    elif shape is not None:
        spec["hf_config"], said = _config_from_shape(shape, setup)
        notes.append(said)
    return spec, notes
