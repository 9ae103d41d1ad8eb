"""The names LoRA targets go by: what users and frameworks call the linear layers an adapter
wraps (q_proj, query, c_attn, w1, ...), and the roles of the memory model they cover."""

from __future__ import annotations

from dataclasses import dataclass
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
# What peft wraps when a LoraConfig names no target_modules, per config.json model_type (peft's
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, 0.21), for the families gpudoc reads. A family
# missing here has no default in peft: its jobs name their targets (peft refuses otherwise).
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "opt",
                     "gptj", "gpt_neo", "stablelm", "bart"), ("q_proj", "v_proj")),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),
    **dict.fromkeys(("gpt2", "gpt_bigcode"), ("c_attn",)),
    **dict.fromkeys(("gpt_neox", "bloom", "falcon"), ("query_key_value",)),
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra"), ("query", "value")),
    **dict.fromkeys(("t5", "mt5"), ("q", "v")),
}


@dataclass(frozen=True)
class LoraTargets:
    """What the adapters wrap: the memory model's ``roles``, the layer ``names`` a simulation hands
    peft (None: peft's own choice, for a factory's model of unknown family), and the ``note`` saying
    how an unset ``lora_targets`` was read (None when the profile names them). ``modules``: the roles
    of each wrapped layer (a fused one, GPT-2's c_attn, covers several with one adapter and one dropout)."""

    roles: tuple[str, ...]
    names: tuple[str, ...] | None
    note: str | None = None
    modules: tuple[tuple[str, ...], ...] = ()


def lora_targets(profile: Any, model_type: str, *, shapes_only: bool = False) -> LoraTargets:
    """The one reading of the adapters' targets both the formula and the simulation use: the
    profile's ``lora_targets``, else peft's default for ``model_type`` (the config.json's, or the
    family a shapes-only profile is simulated as), else q and v, said."""
    roles = lora_targets_of(profile)
    raw = profile.train.get("lora_targets") or profile.model.get("lora_targets")
    if raw:
        return LoraTargets(roles, tuple(target_names(roles)), modules=_modules(raw))
    default = PEFT_DEFAULT_TARGETS.get(model_type)
    if default is None:
        if not model_type:  # a factory's model: its layer names are its own code's
            return LoraTargets(roles, None, "q and v assumed by the formula, and a simulation wraps what peft picks "
                                            "for the factory's model; name them in [train] lora_targets")
        return LoraTargets(roles, tuple(target_names(roles)), f"peft has no default for {model_type}: q and v "
                                                              "assumed; name the job's targets in [train] lora_targets")
    covered = lora_targets_of_names(default)
    family = f"{model_type}, as a profile of shapes is read" if shapes_only else model_type
    return LoraTargets(covered, default, f"peft's default for {family}: {', '.join(default)}", _modules(default))


def lora_targets_of(profile: Any) -> tuple[str, ...]:
    """The roles the profile's ``lora_targets`` cover (peft's default, q and v, when it names none)."""
    raw = profile.train.get("lora_targets") or profile.model.get("lora_targets")  # [model]: its older place
    if not raw:
        return DEFAULT_LORA_TARGETS
    return lora_targets_of_names(raw)


def lora_targets_of_names(raw: Any) -> tuple[str, ...]:
    """The roles layer names cover (a list, or one comma-separated text)."""
    return tuple(dict.fromkeys(role for module in _modules(raw) for role in module))


# Names that stand for several layers, each wrapped on its own (the others name one layer).
_GROUPS = ("mlp", "all-linear", "all_linear")


def _modules(raw: Any) -> tuple[tuple[str, ...], ...]:
    """The roles of each layer the names wrap: ``c_attn`` is one layer covering q, k and v; ``mlp``
    is three."""
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",")]
    modules: list[tuple[str, ...]] = []
    for name in raw:
        key = str(name).strip().lower()
        if key not in TARGET_ALIASES:
            raise ProfileError(
                f"[train] lora_targets: unknown layer {name!r} (use q, k, v, o, gate, up, down, mlp, "
                "output or all-linear)"
            )
        for module in ([(role,) for role in TARGET_ALIASES[key]] if key in _GROUPS else [TARGET_ALIASES[key]]):
            if not any(set(module) & set(seen) for seen in modules):
                modules.append(module)
    return tuple(modules)


def target_names(roles: tuple[str, ...]) -> list[str]:
    """Every layer name the roles go by (q -> q_proj, query, wq, c_attn, ...): what a simulation
    hands peft, whichever family's names the model uses."""
    wanted = set(roles)
    return sorted(name for name, covers in TARGET_ALIASES.items() if wanted & set(covers) and name not in _GROUPS)
