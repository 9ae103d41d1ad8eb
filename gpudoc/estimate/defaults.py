"""What a profile that is silent about a knob is estimated with: never the cheapest case, but the
model's own config, the family's framework default, or the more expensive reading — and a note
saying which."""

from __future__ import annotations

from typing import Any

# [launch] degrees of model parallelism (default 1): world size = data parallel x their product.
PARALLEL_KEYS = ("tensor_parallel", "pipeline_parallel", "context_parallel")

# What older LayerNorm/GELU families (GPT-2, BERT, T5, BART, OPT) train with when nothing says
# otherwise: the dropout probability of their config classes and of the training scripts built on them.
FAMILY_DROPOUT = 0.1
# Any probability above zero stores the same mask and output: the adapters' dropout is assumed on
# when the profile does not say (peft's, LitGPT's and torchtune's LoRA recipes use 0.05-0.1).
ASSUMED_LORA_DROPOUT = 0.1
# An encoder-decoder's decoder length when [train] max_target_len is silent: the job's targets are
# rarely known otherwise, and as long as the inputs is the longer reading for most seq2seq tasks.
TARGET_LEN_NOTE = ("[train] max_target_len not set: the decoder's targets are taken as long as the inputs "
                   "(max_seq_len); set it to the job's target length")


# Frameworks that build the model with their own code, which has no dropout on a decoder's blocks
# (LitGPT's GPT has no dropout layer; torchtune's builders default attn_dropout to 0).
OWN_MODEL_FRAMEWORKS = frozenset({"litgpt", "torchtune"})


# The loss a framework's own training loop computes (``terms.logits_bytes``), where [train] loss is silent.
# LitGPT's finetune scripts (finetune/lora.py of lit-gpt in 2023 and of litgpt 0.5 alike) call
# ``model(input_ids, lm_head_chunk_size=128)``: the head in chunks of 128 positions, which Lightning
# Fabric's precision plugin hands back in the default dtype, fp32 (``convert_output``); then
# ``chunked_cross_entropy`` takes each chunk's cross-entropy, saving its fp32 log-softmax, while the
# loop's ``logits`` keeps the fp32 chunks through ``fabric.backward``.
FRAMEWORK_LOSS = {"litgpt": ("fp32_chunks", "the LM head in chunks whose logits come back in fp32 and stay "
                             "through backward, a cross-entropy per chunk")}


def framework_loss(profile: Any, notes: list[str]) -> str:
    """The loss a profile whose [train] loss is silent is estimated with: its job's framework's own,
    said in ``notes``; else the full-vocabulary one (``lm``)."""
    framework = job_framework(profile)
    if framework not in FRAMEWORK_LOSS:
        return "lm"
    loss, what = FRAMEWORK_LOSS[framework]
    if profile.train.get("loss") is None:
        notes.append(f"[train] loss not set: {framework}'s own, \"{loss}\" ({what})")
    return loss


def job_framework(profile: Any) -> str | None:
    """The framework that runs the job: as read from its command, or as the profile's ``[bind] args``
    names the one whose flags it takes."""
    return getattr(getattr(profile, "job", None), "framework", None) or (getattr(profile, "bind", None) or {}).get("args")


def family_dropout(shape: Any, framework: str | None = None) -> tuple[float, str]:
    """The dropout a model trains with when neither the profile nor a config.json says: the family's
    framework default, judged from the shape of its blocks, and the note that says so."""
    if framework in OWN_MODEL_FRAMEWORKS and shape.arch == "decoder":
        return 0.0, (f"[train] dropout not set: none assumed, as {framework}'s own model code has none; "
                     "set dropout if the model uses it")
    if shape.arch in ("encoder", "encoder-decoder") or (shape.norm == "layernorm" and not shape.gated_mlp):
        return FAMILY_DROPOUT, (f"[train] dropout not set: {FAMILY_DROPOUT:g} assumed, the framework default of "
                                "LayerNorm/GELU and encoder(-decoder) families (GPT-2, BERT, T5, OPT); "
                                "dropout = 0 if the model trains without")
    return 0.0, ("[train] dropout not set: none assumed, as Llama-style blocks (gated MLP, RMSNorm) train; "
                 "set dropout if the model uses it")


def shapes_family(shape: Any) -> str:
    """The model family a profile that gives only shapes is read as, and simulated as: T5 for
    encoder-decoders, BERT for encoders, Llama for gated-MLP/RMSNorm decoders, GPT-2 for plain-MLP
    ones. It also names whose default LoRA targets such a profile gets (peft's for that family)."""
    if shape.arch == "encoder-decoder":
        return "t5"
    if shape.arch == "encoder":
        return "bert"
    return "llama" if shape.gated_mlp or shape.norm == "rmsnorm" else "gpt2"
