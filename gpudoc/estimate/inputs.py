"""What the memory model needs, read from a profile's ``[model]``/``[train]``/``[launch]`` tables or
from a Hugging Face ``config.json``.

Everything here is plain data; ``terms`` and ``model`` do the arithmetic. Missing inputs raise
``ProfileError`` naming the table and key, because a silently defaulted hidden size is how
calculators end up 10x off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, TypeVar

from gpudoc import allocator
from gpudoc.errors import ProfileError
from gpudoc.estimate import adapters, defaults, recompute
from gpudoc.estimate.defaults import ASSUMED_LORA_DROPOUT, PARALLEL_KEYS, TARGET_LEN_NOTE, family_dropout, shapes_family
from gpudoc.estimate.hf_config import model_from_hf_config, read_hf_config
from gpudoc.estimate.lora_targets import DEFAULT_LORA_TARGETS, lora_targets
from gpudoc.estimate.stack import Stack, stack_of

_PRECISIONS = {"fp32", "fp16", "bf16", "bf16-true", "fp16-true"}
_OPTIMIZERS = {"adamw", "adam", "adamw_8bit", "adafactor", "sgd", "lion"}
_QUANT = {"none", "nf4", "int8", "int4"}
_ATTENTION = {"sdpa", "flash", "eager"}
_LOSSES = {"lm", "chunked", "classification", "fp32_logits", "fp32_chunks"}  # terms.logits_bytes


@dataclass(frozen=True)
class ModelShape:
    """A transformer's shapes. ``params`` is the total parameter count (given or derived)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    params: float
    tied_embeddings: bool = False
    gated_mlp: bool = True
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    # The MLP's activation as the config names it ("" when unknown: a fused one is assumed); some
    # are composed of tensor operations whose intermediates autograd keeps (``terms.COMPOSED_TANH_GELU``).
    activation: str = ""
    arch: str = "decoder"
    encoder_layers: int = 0
    decoder_layers: int = 0
    attention_head_dim: int = 0  # when heads x head_dim is not hidden (Gemma, Qwen3, Mistral-Nemo, T5-3B)
    # Mixture of experts: the weights of the experts a token does not pass through (``ffn`` is the
    # width it does pass through): counted in ``params``, quantized with the blocks.
    idle_expert_params: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden // self.heads

    @property
    def attention_width(self) -> int:
        """Width of the queries and of the attention output: heads x head_dim."""
        return self.heads * self.head_dim


@dataclass(frozen=True)
class TrainSetup:
    """The knobs that move memory, normalised."""

    micro_batch_size: int = 1
    seq_len: int = 0
    gradient_accumulation_steps: int = 1
    gradient_checkpointing: str = "none"  # none | full | selective
    precision: str = "fp32"
    zero_stage: int = 0
    fsdp: bool = False
    world_size: int = 1
    offload_optimizer: bool = False
    offload_params: bool = False
    optimizer: str = "adamw"
    momentum: float = 0.9
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    lora_target_names: tuple[str, ...] | None = None  # what a simulation hands peft (None: peft's choice)
    lora_modules: tuple[tuple[str, ...], ...] = ()  # the roles of each adapted layer (): one layer per role
    lora_dropout: float = 0.0
    lora_adapters: str = "peft"  # whose LoRA layers: peft's (fp32 adapters) or the framework's own (``adapters``)
    framework: str | None = None  # the job's, read from its command or named by [bind] args: its loop's ways (``fsdp``)
    quantization: str = "none"
    attention: str = "sdpa"
    dropout: float = 0.0
    loss: str = "lm"
    loss_upcast: bool = True
    optimizer_in_backward: bool = False
    compiled: bool = False  # the blocks run under torch.compile ([train] compile: ``recompute``)
    expandable_segments: bool = False
    target_len: int = 0  # encoder-decoder: decoder tokens per sample (0: as many as seq_len)
    tensor_parallel: int = 1  # parallel layouts ([launch]): world_size = data parallel x tensor x pipeline x context
    pipeline_parallel: int = 1
    context_parallel: int = 1
    in_flight: int = 1  # micro batches whose activations a pipeline stage holds at once (1F1B: up to pp)
    zero_settings: tuple[tuple[str, float | bool | str], ...] = ()  # the job's DeepSpeed JSON's ZeRO keys (zero_settings.py)
    stack: Stack = field(default_factory=Stack)  # the PyTorch release whose defaults apply ([estimate] torch)

    @property
    def sharding_stage(self) -> int:
        """ZeRO stage, with FSDP (FULL_SHARD) counted as stage 3."""
        if self.world_size <= 1:
            return 0
        if self.fsdp and self.zero_stage == 0:
            return 3
        return self.zero_stage


@dataclass(frozen=True)
class Inputs:
    shape: ModelShape
    setup: TrainSetup
    notes: tuple[str, ...] = field(default_factory=tuple)

    def with_micro_batch(self, micro_batch_size: int) -> Inputs:
        return replace(self, setup=replace(self.setup, micro_batch_size=micro_batch_size))


# --- parameter counts from shapes ----------------------------------------------------------------

def layer_matrix_shapes(shape: ModelShape, *, cross_attention: bool = False) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear layer in one transformer block."""
    h, a, kv_dim = shape.hidden, shape.attention_width, shape.kv_heads * shape.head_dim
    mats = {"q": (h, a), "k": (h, kv_dim), "v": (h, kv_dim), "o": (a, h)}
    if shape.gated_mlp:
        mats.update({"gate": (h, shape.ffn), "up": (h, shape.ffn), "down": (shape.ffn, h)})
    else:
        mats.update({"up": (h, shape.ffn), "down": (shape.ffn, h)})
    if cross_attention:
        mats.update({"xq": (h, a), "xk": (h, a), "xv": (h, a), "xo": (a, h)})
    return mats


def layer_params(shape: ModelShape, *, cross_attention: bool = False) -> int:
    """Weights of one block: its linear layers plus two norms (biases are noise at this scale)."""
    mats = layer_matrix_shapes(shape, cross_attention=cross_attention)
    return sum(i * o for i, o in mats.values()) + 2 * shape.hidden


def n_blocks(shape: ModelShape) -> tuple[int, int]:
    """(self-attention-only blocks, blocks with cross-attention)."""
    if shape.arch == "encoder-decoder" and shape.decoder_layers:
        return shape.encoder_layers or (shape.layers - shape.decoder_layers), shape.decoder_layers
    return shape.layers, 0


def block_params(shape: ModelShape) -> int:
    plain, cross = n_blocks(shape)
    return plain * layer_params(shape) + cross * layer_params(shape, cross_attention=True)


def embedding_params(shape: ModelShape) -> int:
    return shape.vocab * shape.hidden * (1 if shape.tied_embeddings else 2)


def params_from_shapes(shape: ModelShape) -> int:
    return block_params(shape) + embedding_params(shape) + shape.hidden


# --- profile -> Inputs ---------------------------------------------------------------------------

HF_CONFIG_HINT = ("[model] hf_config = \"ORG/NAME\" (a config.json, its directory, or a model id in the local "
                  "Hugging Face cache)")


def _missing(table: str, key: str) -> ProfileError:
    if table == "model":
        return ProfileError(f"[model] {key} is missing: set {HF_CONFIG_HINT} or {key} = N", key=f"model.{key}")
    return ProfileError(f"[{table}] {key} is missing: set it in the profile")


def _positive_int(table: str, key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ProfileError(f"[{table}] {key} = {value!r}: expected a whole number") from None
    if number < 0 or (number == 0 and key not in ("kv_heads", "lora_rank", "zero_stage")):
        raise ProfileError(f"[{table}] {key} = {value!r}: expected a positive number")
    return number


def _choice(table: str, key: str, value: Any, allowed: set[str], default: str) -> str:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in allowed:
        raise ProfileError(f"[{table}] {key} = {value!r}: expected one of {', '.join(sorted(allowed))}")
    return text


def _gated_guess(model: Mapping[str, Any], shape_wo_gate: dict) -> tuple[bool, bool]:
    """(gated MLP, tied embeddings). Gated (3-matrix) or plain (2-matrix) MLP, and tied or separate
    LM head when unstated: the combination whose parameter count matches ``params`` when given;
    otherwise gated unless ffn == 4 * hidden (the GPT/BERT shape)."""
    tied = bool(shape_wo_gate["tied_embeddings"])
    params = model.get("params")
    if "_gated" in model and not (params and "tied_embeddings" not in model):
        return bool(model["_gated"]), tied
    if params:
        best: tuple[float, bool, bool] = (float("inf"), True, True)
        for gated in (True, False):
            for tied in ((model["tied_embeddings"],) if "tied_embeddings" in model else (True, False)):
                trial = ModelShape(**{**shape_wo_gate, "gated_mlp": gated, "tied_embeddings": tied})
                err = abs(params_from_shapes(trial) - float(params)) / float(params)
                if err < best[0]:
                    best = (err, gated, bool(tied))
        gated = bool(model["_gated"]) if "_gated" in model else best[1]
        return gated, best[2]
    return shape_wo_gate["ffn"] != 4 * shape_wo_gate["hidden"], tied


_Reader = TypeVar("_Reader", bound=Callable[..., Any])


def _naming_the_profile(reader: _Reader) -> _Reader:
    """A profile error raised while reading ``profile`` names its file, for the JSON envelope's
    ``error.file`` (the messages name the table and key; the file is the profile's)."""
    @functools.wraps(reader)
    def read(profile: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return reader(profile, *args, **kwargs)
        except ProfileError as exc:
            if exc.file is None and getattr(profile, "path", None):
                exc.file = str(profile.path)
            raise
    return read  # type: ignore[return-value]


@_naming_the_profile
def model_shape(profile: Any) -> tuple[ModelShape, list[str], dict]:
    """The ``[model]`` table (merged over ``hf_config`` when given) as a ``ModelShape``."""
    notes: list[str] = []
    model: dict[str, Any] = {}
    hf_name = profile.model.get("hf_config")
    if hf_name:
        model.update(model_from_hf_config(read_hf_config(profile, str(hf_name))))
    model.update({k: v for k, v in profile.model.items() if k != "hf_config"})
    if model.get("arch") == "state-space":
        source = f"hf_config = \"{hf_name}\"" if "_state_space" in model else "arch = \"state-space\""
        raise ProfileError(f"[model] {source}: {model.get('_state_space', 'a state-space model')}: the estimate's "
                           "formula covers transformer blocks (attention + MLP), not selective scans; [model] factory "
                           "= \"module:function\" with --simulate runs the model's own code instead, and run and "
                           "fix go by measured peaks", key="model.arch")
    if not model.get("layers") and model.get("encoder_layers") and model.get("decoder_layers"):
        model["layers"] = int(model["encoder_layers"]) + int(model["decoder_layers"])
    for key in ("hidden", "layers", "heads", "vocab"):
        if not model.get(key):
            raise _missing("model", key)
    hidden = _positive_int("model", "hidden", model["hidden"])
    heads = _positive_int("model", "heads", model["heads"])
    head_dim = _positive_int("model", "head_dim", model["head_dim"]) if model.get("head_dim") else 0
    if hidden % heads and not head_dim:
        raise ProfileError(f"[model] hidden = {hidden} is not a multiple of heads = {heads}")
    kv_heads = _positive_int("model", "kv_heads", model.get("kv_heads") or heads) or heads
    ffn = model.get("ffn")
    if not ffn:
        ffn = 4 * hidden
        notes.append("[model] ffn not given: assumed 4 x hidden")
    arch = _choice("model", "arch", model.get("arch"), {"decoder", "encoder", "encoder-decoder"}, "decoder")
    base: dict[str, Any] = {
        "layers": _positive_int("model", "layers", model["layers"]),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn": _positive_int("model", "ffn", ffn),
        "vocab": _positive_int("model", "vocab", model["vocab"]),
        "params": 0.0,
        "tied_embeddings": bool(model.get("tied_embeddings", False)),
        "arch": arch,
        "encoder_layers": int(model.get("encoder_layers") or 0),
        "decoder_layers": int(model.get("decoder_layers") or 0),
        "attention_head_dim": head_dim,
        "idle_expert_params": float(model.get("_idle_expert_params") or 0.0),
    }
    if arch == "encoder-decoder" and not (base["encoder_layers"] and base["decoder_layers"]):
        base["decoder_layers"] = base["layers"] // 2
        base["encoder_layers"] = base["layers"] - base["decoder_layers"]
    gated, tied = _gated_guess(model, base)
    norm = model.get("_norm") or ("rmsnorm" if gated else "layernorm")
    shape = ModelShape(**{**base, "gated_mlp": gated, "tied_embeddings": tied, "norm": norm,
                          "activation": str(model.get("_activation") or "")})
    if model.get("_note"):
        notes.append(model["_note"])
    if model.get("params"):
        shape = replace(shape, params=float(model["params"]))
        derived = params_from_shapes(shape)
        if abs(derived - shape.params) > 0.15 * shape.params and not model.get("_note"):
            notes.append(
                f"[model] params = {shape.params:.3g} but the shapes give {derived:.3g}: "
                "the given count is used for weights, gradients and optimizer states"
            )
    else:
        shape = replace(shape, params=float(params_from_shapes(shape)))
    extras: dict[str, Any] = {}
    if "_dropout" in model:
        extras["dropout"] = float(model["_dropout"])
        extras["dropout_note"] = (f"[train] dropout not set: {extras['dropout']:g}, as the model's config.json "
                                  "states")
    else:
        extras["dropout"], extras["dropout_note"] = family_dropout(shape, defaults.job_framework(profile))
    # Whose default LoRA targets apply (none for a factory's model: peft reads its layer names itself).
    family = "" if model.get("factory") else model.get("_model_type") or ("" if hf_name else shapes_family(shape))
    extras.update(shapes_only=not hf_name, model_type=str(family))
    if arch == "encoder-decoder" and not profile.train.get("max_target_len"):
        notes.append(TARGET_LEN_NOTE)
    return shape, notes, extras


def _checkpointing(value: Any) -> str:
    if value is None or value is False:
        return "none"
    if value is True:
        return "full"
    text = str(value).strip().lower()
    if text in ("true", "full", "yes", "on", "1"):
        return "full"
    if text in ("false", "none", "no", "off", "0", ""):
        return "none"
    if text == "selective":
        return "selective"
    raise ProfileError(f"[train] gradient_checkpointing = {value!r}: expected true, false or \"selective\"")


# The notes that say how a silent profile's LoRA adapters are read: moot when a factory's model
# brings its own adapters (the simulation then says so instead).
LORA_READING_NOTES = ("[train] lora_dropout not set:", "[train] lora_targets not set:")


@_naming_the_profile
def train_setup(profile: Any, notes: list[str], extras: Mapping[str, Any] | None = None) -> TrainSetup:
    train = profile.train
    extras = extras or {}
    if train.get("dropout") is None and extras.get("dropout_note"):
        notes.append(extras["dropout_note"])
    lora_rank = _positive_int("train", "lora_rank", train.get("lora_rank") or 0)
    lora_dropout = train.get("lora_dropout")
    if lora_rank and lora_dropout is None:
        lora_dropout = ASSUMED_LORA_DROPOUT
        notes.append(f"{LORA_READING_NOTES[0]} the adapters' dropout is assumed on (the more expensive "
                     "reading; LoRA recipes use 0.05-0.1); lora_dropout = 0 if it is off")
    targets = lora_targets(profile, str(extras.get("model_type") or ""), shapes_only=bool(extras.get("shapes_only")))
    if lora_rank and targets.note:
        notes.append(f"{LORA_READING_NOTES[1]} {targets.note}")
    world = max(1, int(profile.world_size))
    launch = getattr(profile, "launch", None) or {}
    tp, pp, cp = (_positive_int("launch", key, launch.get(key) or 1) for key in PARALLEL_KEYS)
    if world % (tp * pp * cp):
        raise ProfileError(f"[launch] tensor_parallel x pipeline_parallel x context_parallel = {tp} x {pp} x {cp} "
                           f"does not divide the world size {world} (nproc_per_node x nnodes)",
                           key="launch.tensor_parallel")
    seq = train.get("max_seq_len")
    if not seq and getattr(profile, "path", None) is None and getattr(profile, "job", None) is not None:
        # No profile: the job was read from its command, which states no sequence length.
        raise ProfileError("the job's command and configs give no sequence length (--max_seq_length, "
                           "max_seq_len=, ...): a profile with [train] max_seq_len = N says it "
                           "(`gpudoc estimate -p FILE -- COMMAND`)", key="train.max_seq_len")
    if not seq:
        raise _missing("train", "max_seq_len")
    mbs = train.get("micro_batch_size")
    if mbs is None:
        notes.append("[train] micro_batch_size not set: estimated for 1")
    precision = _choice("train", "precision", train.get("precision"), _PRECISIONS, "fp32")
    env = {k: str(v) for k, v in (getattr(profile, "env", {}) or {}).items()}
    return TrainSetup(
        micro_batch_size=_positive_int("train", "micro_batch_size", mbs if mbs is not None else 1),
        seq_len=_positive_int("train", "max_seq_len", seq),
        gradient_accumulation_steps=_positive_int("train", "gradient_accumulation_steps", train.get("gradient_accumulation_steps") or 1),
        gradient_checkpointing=_checkpointing(train.get("gradient_checkpointing")),
        precision=precision,
        zero_stage=min(3, _positive_int("train", "zero_stage", train.get("zero_stage") or 0)),
        fsdp=bool(train.get("fsdp", False)), framework=defaults.job_framework(profile),
        world_size=world,
        offload_optimizer=bool(train.get("offload_optimizer", False)),
        offload_params=bool(train.get("offload_params", False)),
        optimizer=_choice("train", "optimizer", train.get("optimizer"), _OPTIMIZERS, "adamw"),
        momentum=float(train.get("momentum", 0.9) or 0.0),
        lora_rank=lora_rank, lora_targets=targets.roles, lora_target_names=targets.names, lora_modules=targets.modules,
        lora_dropout=float(lora_dropout or 0.0), lora_adapters=adapters.library(profile),
        quantization=_choice("train", "quantization", train.get("quantization"), _QUANT, "none"),
        attention=_choice("train", "attention", train.get("attention"), _ATTENTION, "sdpa"),
        dropout=float(train.get("dropout", extras.get("dropout", 0.0)) or 0.0),
        loss=_choice("train", "loss", train.get("loss"), _LOSSES, defaults.framework_loss(profile, notes)),
        loss_upcast=bool(train.get("loss_upcast", True)),
        optimizer_in_backward=bool(train.get("optimizer_in_backward", False)), compiled=recompute.compiled(train),
        expandable_segments=allocator.is_expandable(allocator.effective(env)),
        target_len=_positive_int("train", "max_target_len", train["max_target_len"]) if train.get("max_target_len") else 0,
        tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp, stack=stack_of(profile, notes),
    )


def inputs_from_profile(profile: Any) -> Inputs:
    shape, notes, extras = model_shape(profile)
    setup = train_setup(profile, notes, extras)
    return Inputs(shape=shape, setup=setup, notes=tuple(notes))
