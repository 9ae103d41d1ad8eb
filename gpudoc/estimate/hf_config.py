"""A Hugging Face ``config.json`` as the ``[model]`` table: the field names of the common families.

Each family spells the same shape its own way (``hidden_size`` / ``n_embd`` / ``n_embed`` /
``d_model``, ``intermediate_size`` / ``n_inner`` / ``d_ff`` / ``ffn_dim``) and leaves some of it to
its config class's defaults (GPT-2's ``n_inner = None`` is 4 x hidden; Llama's lm_head is untied
unless said, GPT-2's is tied). The defaults here are those of the transformers config classes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.errors import ProfileError
from gpudoc.estimate.model_source import find_model_config, read_config_json

_HF_KEYS = {
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model", "dim"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_head_kv", "multi_query_group_num"),
    "ffn": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "head_dim": ("head_dim", "d_kv"),
}
# Families whose MLP is 4 x hidden when the config leaves it out (n_inner = None, no ffn field).
_FFN_4X = frozenset({"gpt2", "gpt_neo", "gpt_bigcode", "bloom", "falcon"})
# Gated (SwiGLU/GeGLU, three matrices) MLPs, whatever activation the config names.
_GATED = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                    "gemma3", "gemma3_text", "phi3", "olmo", "olmo2", "cohere"})
# tie_word_embeddings when the config does not say: PretrainedConfig's True, unless the family's
# config class defaults to False.
_UNTIED_BY_DEFAULT = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                                "gpt_neox", "phi", "phi3", "olmo", "olmo2"})
_TIED_BY_DEFAULT = frozenset({"gpt2", "gpt_neo", "gpt_bigcode", "bert", "roberta", "xlm-roberta", "electra",
                              "opt", "bloom", "t5", "falcon", "gemma", "gemma2", "gemma3", "gemma3_text",
                              "mamba", "mamba2"})
# The activation each family's config class defaults to when config.json does not name one.
_DEFAULT_ACT = {"t5": "relu", "opt": "relu", "bloom": "gelu", "falcon": "gelu", "gpt2": "gelu_new",
                "gpt_neox": "gelu", "bert": "gelu", "roberta": "gelu", "phi": "gelu_new"}
_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout", "dropout_rate",
                 "hidden_dropout_prob", "resid_pdrop", "hidden_dropout", "embd_pdrop", "dropout")
_ENCODERS = frozenset({"bert", "roberta", "deberta", "deberta-v2", "electra", "xlm-roberta"})
_STATE_SPACE = frozenset({"mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2"})


def _number(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return None


def _check_shape_values(config: Mapping[str, Any], source: str) -> None:
    """A shape the config states must be a positive number: a typo'd or zeroed field is named,
    not read as missing (null is a config class's "unset", and is)."""
    for key, names in _HF_KEYS.items():
        for name in names:
            value = config.get(name)
            if value is None:
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or (value <= 0 and key not in ("kv_heads", "head_dim")) or value < 0:
                raise ProfileError(f"{source}: {name} = {json.dumps(value)}: expected a positive number",
                                   file=source, key=name)


def _moe(config: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): every expert has weights, gradients and
    optimizer states, but a token passes only through its top-k (and the shared expert): ``ffn``
    becomes that per-token width and ``params`` counts all experts."""
    experts = _number(config, "num_local_experts", "num_experts")
    top_k = _number(config, "num_experts_per_tok", "moe_top_k")
    if not experts or not top_k or experts <= 1:
        return
    h, layers, heads = out["hidden"], out["layers"], out["heads"]
    dense_ffn = out.get("ffn") or 4 * h
    expert_ffn = _number(config, "moe_intermediate_size") or dense_ffn
    shared_ffn = _number(config, "shared_expert_intermediate_size") or 0
    head_dim = out.get("head_dim") or h // heads
    attention = 2 * h * heads * head_dim + 2 * h * (out.get("kv_heads") or heads) * head_dim
    step = _number(config, "decoder_sparse_step") or 1
    dense_layers = set(config.get("mlp_only_layers") or ())
    moe_layers = sum(1 for i in range(layers) if i not in dense_layers and (i + 1) % step == 0)
    per_moe = experts * 3 * h * expert_ffn + h * experts + (3 * h * shared_ffn + h if shared_ffn else 0)
    blocks = layers * (attention + 2 * h) + moe_layers * per_moe + (layers - moe_layers) * 3 * h * dense_ffn
    tied = out.get("tied_embeddings", False)
    out["params"] = blocks + out["vocab"] * h * (1 if tied else 2) + h
    out["ffn"] = top_k * expert_ffn + shared_ffn
    out["_idle_expert_params"] = moe_layers * (experts - top_k) * 3 * h * expert_ffn
    out["_gated"] = True
    out["_note"] = (f"[model] mixture of experts: {experts} experts, {top_k} per token: weights, gradients and "
                    f"optimizer states count every expert; activations the {top_k} a token passes through"
                    + (" and the shared expert" if shared_ffn else ""))


def _state_space(config: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Mamba / Mamba-2 blocks (selective scans, no attention): the parameter count from the
    layout of transformers' MambaMixer / Mamba2Mixer, and the mark that the formula does not cover
    them."""
    h, layers = out.get("hidden"), out.get("layers")
    out.pop("heads", None)  # Mamba-2's num_heads are the scan's heads, not attention heads
    out.pop("head_dim", None)
    out.pop("ffn", None)
    kind = "Mamba-2" if config.get("model_type") == "mamba2" else "Mamba"
    out["arch"] = "state-space"
    out["_state_space"] = f"a {kind} model"
    if not h or not layers or not out.get("vocab"):
        return
    inner = _number(config, "intermediate_size") or int((_number(config, "expand") or 2) * h)
    state = _number(config, "state_size", "d_state") or 16
    kernel = _number(config, "conv_kernel", "d_conv") or 4
    if kind == "Mamba":
        rank = config.get("time_step_rank")
        rank = math.ceil(h / 16) if not isinstance(rank, int) else rank
        mixer = (h * 2 * inner + inner * kernel + inner + inner * (rank + 2 * state) + rank * inner + inner
                 + inner * state + inner + inner * h)
    else:
        groups = _number(config, "n_groups") or 1
        scan_heads = _number(config, "num_heads") or inner // 64
        conv = inner + 2 * groups * state
        mixer = (h * (2 * inner + 2 * groups * state + scan_heads) + conv * kernel + conv + 3 * scan_heads
                 + inner + inner * h)
    tied = out.get("tied_embeddings", True)
    out["params"] = layers * (mixer + h) + out["vocab"] * h * (1 if tied else 2) + h


def model_from_hf_config(config: Mapping[str, Any], source: str = "config.json") -> dict:
    """Map a Hugging Face ``config.json`` onto ``[model]`` keys (only those it states or its family's
    config class defines). Keys starting with ``_`` are hints for ``inputs.model_shape``."""
    if "text_config" in config and "hidden_size" not in config:
        config = {**config, **config["text_config"]}  # multimodal wrappers keep the LM inside
    family = str(config.get("model_type") or "")
    out: dict[str, Any] = {"_model_type": family} if family else {}
    for key, names in _HF_KEYS.items():
        value = _number(config, *names)
        if value is not None:
            out[key] = value
    if family in _FFN_4X and "ffn" not in out and "hidden" in out:
        out["ffn"] = 4 * out["hidden"]
    if family == "falcon" and not config.get("new_decoder_architecture") and config.get("multi_query", True):
        out["kv_heads"] = 1  # Falcon-7B's multi-query attention: one K/V head
    if "tie_word_embeddings" in config:
        out["tied_embeddings"] = bool(config["tie_word_embeddings"])
    elif family in _TIED_BY_DEFAULT or family in _UNTIED_BY_DEFAULT:
        out["tied_embeddings"] = family in _TIED_BY_DEFAULT
    if config.get("is_encoder_decoder"):
        out["arch"] = "encoder-decoder"
        out["encoder_layers"] = _number(config, "num_layers", "encoder_layers") or int(out.get("layers", 0))
        out["decoder_layers"] = _number(config, "num_decoder_layers", "decoder_layers") or out["encoder_layers"]
        out["layers"] = out["encoder_layers"] + out["decoder_layers"]
    elif family in _ENCODERS:
        out["arch"] = "encoder"
    act = str(config.get("hidden_act") or config.get("activation_function") or config.get("feed_forward_proj")
              or _DEFAULT_ACT.get(family, ""))
    # Gated MLPs (SwiGLU/GeGLU) use three matrices; the config names the activation, and Llama-style
    # families name "silu" with an intermediate_size that is not 4x hidden.
    if act:
        out["_activation"] = act
    if "gated" in act or family in _GATED:
        out["_gated"] = True
    elif act in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "gelu_fast", "quick_gelu"):
        out["_gated"] = False
    # The dropout the model trains with, as its config states it (0.0 stated is a fact too: Llama,
    # Phi, GPT-NeoX and BLOOM configs turn it off); the largest of the probabilities it names.
    stated = [float(config[name]) for name in _DROPOUT_KEYS
              if isinstance(config.get(name), (int, float)) and not isinstance(config.get(name), bool)]
    if stated:
        out["_dropout"] = max(stated)
    if "rms_norm_eps" in config or family == "t5":  # T5LayerNorm scales only: an RMSNorm
        out["_norm"] = "rmsnorm"
    elif "layer_norm_eps" in config or "layer_norm_epsilon" in config:
        out["_norm"] = "layernorm"
    proj = _number(config, "word_embed_proj_dim")
    if family == "opt" and proj and {"hidden", "layers", "heads", "vocab"} <= out.keys() and proj != out["hidden"]:
        # OPT-350m embeds in 512 and projects in and out of its 1024 hidden size.
        h, f = out["hidden"], out.get("ffn") or 4 * out["hidden"]
        out["params"] = out["layers"] * (4 * h * h + 2 * h * f + 2 * h) + out["vocab"] * proj + 2 * h * proj + h
    if family in _STATE_SPACE:
        _state_space(config, out)
    elif {"hidden", "layers", "heads", "vocab"} <= out.keys():
        _moe(config, out)
    return out


def read_hf_config(profile: Any, name: str, environ: Mapping[str, str] | None = None) -> dict:
    """``[model] hf_config``: a file or a directory holding ``config.json``, beside the profile (or a
    parent it extends) or from here, else a model id in the local Hugging Face cache."""
    bases: list[Path] = []
    if getattr(profile, "path", None) is not None:
        bases.append(Path(profile.path).parent)
    bases += [Path(p).parent for p in (getattr(profile, "chain", ()) or ())]
    bases.append(Path.cwd())
    where = getattr(profile, "path", None)
    path = find_model_config(name, bases=list(dict.fromkeys(bases)), environ=environ,
                             file=str(where) if where else None)
    config = read_config_json(path, name)
    for part in (config, config.get("text_config")):  # a multimodal wrapper keeps the LM's inside
        if isinstance(part, Mapping):
            _check_shape_values(part, str(path))
    return config


def with_dropout(config: Mapping[str, Any], probability: float) -> dict:
    """``config`` with every dropout probability a family's config names set to ``probability``
    (``[train] dropout``, which the formula reads over the config's own): keys a family does not
    know are ignored by its config class."""
    return {**config, **dict.fromkeys(_DROPOUT_KEYS, probability)}
