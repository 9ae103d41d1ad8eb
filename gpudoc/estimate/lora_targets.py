"""The names LoRA targets go by: what users and frameworks call the linear layers an adapter
wraps (q_proj, query, c_attn, w1, ...), and the roles of the memory model they cover."""

from __future__ import annotations

from typing import Any

from gpudoc.errors import ProfileError

# Names users and frameworks give to the linear layers LoRA can target, mapped onto the roles the
# model knows. "mlp" and "all-linear" expand to several roles.
TARGET_ALIASES = {
    "q": ("q",), "q_proj": ("q",), "query": ("q",), "wq": ("q",),
    "k": ("k",), "k_proj": ("k",), "key": ("k",), "wk": ("k",),
    "v": ("v",), "v_proj": ("v",), "value": ("v",), "wv": ("v",),
    "o": ("o",), "o_proj": ("o",), "output_proj": ("o",), "out_proj": ("o",), "dense": ("o",),
    "projection": ("o",), "proj": ("o",), "wo": ("o",),
    "qkv": ("q", "k", "v"), "c_attn": ("q", "k", "v"), "query_key_value": ("q", "k", "v"),
    "gate": ("gate",), "gate_proj": ("gate",), "w1": ("gate",),
    "up": ("up",), "up_proj": ("up",), "w3": ("up",), "fc1": ("up",), "c_fc": ("up",),
    "down": ("down",), "down_proj": ("down",), "w2": ("down",), "fc2": ("down",), "c_proj": ("down",),
    "mlp": ("gate", "up", "down"),
    "output": ("head",), "lm_head": ("head",), "head": ("head",),
    "all-linear": ("q", "k", "v", "o", "gate", "up", "down"),
    "all_linear": ("q", "k", "v", "o", "gate", "up", "down"),
}
# PEFT's default for Llama-family models when no target_modules are given.
DEFAULT_LORA_TARGETS = ("q", "v")


def lora_targets_of(profile: Any) -> tuple[str, ...]:
    """The roles the profile's ``lora_targets`` cover (peft's default, q and v, when it names none)."""
    raw = profile.train.get("lora_targets") or profile.model.get("lora_targets")  # [model]: its older place
    if not raw:
        return DEFAULT_LORA_TARGETS
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",")]
    roles: list[str] = []
    for name in raw:
        key = str(name).strip().lower()
        if key not in TARGET_ALIASES:
            raise ProfileError(
                f"[train] lora_targets: unknown layer {name!r} (use q, k, v, o, gate, up, down, mlp, "
                "output or all-linear)"
            )
        for role in TARGET_ALIASES[key]:
            if role not in roles:
                roles.append(role)
    return tuple(roles)


def target_names(roles: tuple[str, ...]) -> list[str]:
    """Every layer name the roles go by (q -> q_proj, query, wq, c_attn, ...): what a simulation
    hands peft, whichever family's names the model uses."""
    wanted = set(roles)
    return sorted(name for name, covers in TARGET_ALIASES.items()
                  if wanted & set(covers) and name not in ("mlp", "all-linear", "all_linear"))
