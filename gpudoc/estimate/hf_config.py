"""A Hugging Face ``config.json`` as the ``[model]`` table: the field names of the common families."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpudoc.errors import ProfileError

_HF_KEYS = {
    "hidden": ("hidden_size", "n_embd", "d_model", "dim"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "ffn": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
}


def model_from_hf_config(config: Mapping[str, Any], source: str = "config.json") -> dict:
    """Map a Hugging Face ``config.json`` onto ``[model]`` keys (only those it states)."""
    if "text_config" in config and "hidden_size" not in config:
        config = {**config, **config["text_config"]}  # multimodal wrappers keep the LM inside
    out: dict[str, Any] = {}
    for key, names in _HF_KEYS.items():
        for name in names:
            value = config.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = int(value)
                break
    if "tie_word_embeddings" in config:
        out["tied_embeddings"] = bool(config["tie_word_embeddings"])
    elif config.get("model_type") in ("gpt2", "bert", "roberta", "gpt_neo", "opt", "bloom", "t5"):
        out["tied_embeddings"] = config.get("model_type") != "t5" or bool(config.get("tie_word_embeddings", True))
    if config.get("is_encoder_decoder"):
        out["arch"] = "encoder-decoder"
        out["encoder_layers"] = int(config.get("num_layers") or config.get("encoder_layers") or out.get("layers", 0))
        out["decoder_layers"] = int(config.get("num_decoder_layers") or config.get("decoder_layers")
                                    or out["encoder_layers"])
    elif config.get("model_type") in ("bert", "roberta", "deberta", "deberta-v2", "electra", "xlm-roberta"):
        out["arch"] = "encoder"
    act = str(config.get("hidden_act") or config.get("activation_function") or config.get("feed_forward_proj") or "")
    # Gated MLPs (SwiGLU/GeGLU) use three matrices; the config names the activation, and Llama-style
    # families name "silu" with an intermediate_size that is not 4x hidden.
    if "gated" in act or config.get("model_type") in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma",
                                                       "gemma2", "phi3", "olmo", "olmo2", "cohere"):
        out["_gated"] = True
    elif act in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "gelu_fast", "quick_gelu"):
        out["_gated"] = False
    for name in ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout", "dropout_rate",
                 "hidden_dropout_prob", "resid_pdrop", "hidden_dropout"):
        value = config.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            out["_dropout"] = float(value)
            break
    if "rms_norm_eps" in config:
        out["_norm"] = "rmsnorm"
    elif "layer_norm_eps" in config or "layer_norm_epsilon" in config:
        out["_norm"] = "layernorm"
    return out


def read_hf_config(profile: Any, name: str) -> dict:
    """``[model] hf_config``: a path beside the profile (or a parent it extends), or from here."""
    path = Path(name).expanduser()
    candidates = [path] if path.is_absolute() else [p.parent / path for p in (getattr(profile, "chain", ()) or ())]
    if not path.is_absolute() and getattr(profile, "path", None) is not None:
        candidates.insert(0, Path(profile.path).parent / path)
    if not path.is_absolute():
        candidates.append(Path.cwd() / path)
    for candidate in candidates:
        if candidate.is_file():
            try:
                config = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                raise ProfileError(f"[model] hf_config = \"{name}\": cannot read {candidate}: {exc}",
                                   file=str(candidate), key="model.hf_config") from None
            if not isinstance(config, dict):
                raise ProfileError(f"[model] hf_config = \"{name}\": {candidate} holds a JSON {type(config).__name__}, "
                                   "not the object of a model's config.json", file=str(candidate), key="model.hf_config")
            return config
    where = getattr(profile, "path", None)
    raise ProfileError(
        f"[model] hf_config = \"{name}\": file not found"
        + (f" (looked beside {where})" if where else "")
    )
