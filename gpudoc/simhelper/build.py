"""The model, its batch and its optimizer, on the meta device, as the spec describes the job."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


class Unsupported(Exception):
    """The job cannot be simulated faithfully; the message is the reason the formula answers."""


_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
           "bf16-true": torch.bfloat16, "fp16-true": torch.float16}
_MIXED = {"fp16", "bf16"}


def param_dtype(spec: dict) -> Any:
    """The dtype the weights are created in: fp32 unless training in pure half precision, and the
    compute dtype for a LoRA base (loaded in bf16/fp16 and frozen) and under DeepSpeed ZeRO (its
    engine casts the module to the half dtype; the fp32 master is the optimizer's, ``zero``)."""
    precision = spec["precision"]
    if precision in _MIXED and (spec.get("lora") or spec.get("zero")):
        return _DTYPES[precision]
    return torch.float32 if precision in _MIXED or precision == "fp32" else _DTYPES[precision]


def autocast_dtype(spec: dict) -> Any:
    """torch.autocast's dtype under mixed precision; none under DeepSpeed, whose model is half already."""
    return _DTYPES[spec["precision"]] if spec["precision"] in _MIXED and not spec.get("zero") else None


@dataclass
class Job:
    model: Any
    make_batch: Callable[[int], Any]  # micro batch size -> the forward's inputs (a dict, tuple or tensor)
    notes: list[str]
    own_adapters: bool = False  # a factory's model that froze its own base (its own LoRA code)
    checkpoints_itself: bool = False  # a factory that takes gradient_checkpointing applies it itself


def build(spec: dict) -> Job:
    notes: list[str] = []
    if spec.get("factory"):
        job = _from_factory(spec, notes)
    else:
        job = _from_config(spec, notes)
    model = job.model
    if type(model).__name__ == "OptimizedModule" or hasattr(model, "_orig_mod"):
        raise Unsupported("the model is torch.compile'd: compiled graphs save other tensors than eager mode")
    own_adapters = bool(spec.get("factory")) and any(not p.requires_grad for p in model.parameters())
    if spec.get("quantization", "none") != "none":
        _four_bit(model, spec, notes)
    if spec.get("lora"):
        if own_adapters:
            # The factory froze part of its model itself (its own adapters): wrapping it again in
            # peft's would train a second set.
            notes.append(f"lora_rank: the factory's model already trains only part of itself "
                         f"({spec['factory']}); no peft adapters added")
        else:
            model = _lora(model, spec["lora"], notes)
    if spec["gradient_checkpointing"] != "none" and not job.checkpoints_itself:
        _checkpointing(model, spec, notes)
    model.train()
    return Job(model, job.make_batch, notes, own_adapters)


# -- Hugging Face config.json ----------------------------------------------------------------------

def _from_config(spec: dict, notes: list[str]) -> Job:
    try:
        import transformers
    except ImportError:
        raise Unsupported("transformers is not installed in the job's interpreter (needed to build the "
                          "model from config.json)") from None
    data = dict(spec["hf_config"])
    if data.get("quantization_config"):
        raise Unsupported("the checkpoint is quantized (config.json has quantization_config): its kernels "
                          "have no meta implementation")
    model_type = data.pop("model_type", None)
    if not model_type:
        raise Unsupported("config.json has no model_type, so transformers cannot pick the model class")
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError) as exc:
        raise Unsupported(f"transformers {transformers.__version__} cannot read this config.json: {exc}") from None
    # The HF Trainer of transformers 5 trains without a key/value cache: it sets ``model.config.use_cache =
    # args.use_cache`` (trainer.py; False by default in training_args.py, transformers#41585). With it on,
    # DynamicLayer.update (cache_utils.py) keeps ``torch.cat`` copies of every layer's keys and values beside
    # what autograd saves. An older Trainer leaves config.json's use_cache as it is, and so does the simulation.
    if int(transformers.__version__.split(".")[0]) >= 5:
        config.use_cache = False
    auto = {"decoder": transformers.AutoModelForCausalLM, "encoder": transformers.AutoModelForMaskedLM,
            "encoder-decoder": transformers.AutoModelForSeq2SeqLM}[spec.get("arch") or "decoder"]
    classify = spec.get("loss") == "classification"  # a sequence-classification head: one label a sample
    if classify:
        auto = transformers.AutoModelForSequenceClassification
    attn = "eager" if spec.get("attention") == "eager" else "sdpa"
    with torch.device("meta"):
        try:
            model = auto.from_config(config, attn_implementation=attn, dtype=param_dtype(spec))
        except ValueError as exc:
            if attn == "eager":
                raise Unsupported(f"transformers cannot build {model_type}: {exc}") from None
            model = auto.from_config(config, attn_implementation="eager", dtype=param_dtype(spec))
            notes.append(f"{type(model).__name__} has no SDPA attention in transformers: simulated with eager")
    vocab = int(getattr(config, "vocab_size", 0) or 2)
    seq = int(spec["seq_len"])
    target = int(spec.get("target_len") or seq)
    encdec = spec.get("arch") == "encoder-decoder"

    def make_batch(batch: int) -> dict:
        ids = torch.randint(0, vocab, (batch, seq), device="meta")
        labels = torch.randint(0, vocab, (batch, target if encdec else seq), device="meta") if not classify \
            else torch.randint(0, int(config.num_labels), (batch,), device="meta")
        return {"input_ids": ids, "labels": labels}

    return Job(model, make_batch, notes)


# -- the user's own factory ------------------------------------------------------------------------

def _from_factory(spec: dict, notes: list[str]) -> Job:
    target = spec["factory"]
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise Unsupported(f"[model] factory = \"{target}\": expected \"package.module:function\"")
    if spec.get("cwd") and spec["cwd"] not in sys.path:
        sys.path.insert(0, spec["cwd"])  # the project's own modules, as `python train.py` finds them
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # any import-time failure of the user's code is a reason, not a crash
        raise Unsupported(f"[model] factory = \"{target}\" cannot be imported: {type(exc).__name__}: {exc}") from None
    try:
        wanted = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        wanted = {}  # type: ignore[assignment]
    # The profile's knobs, for a factory that takes them; gradient_checkpointing as the profile
    # writes it (true, false or "selective"): a factory that takes it checkpoints its own way.
    knobs = {"max_seq_len": spec["seq_len"], "precision": spec["precision"],
             "gradient_checkpointing": {"none": False, "full": True}.get(spec["gradient_checkpointing"], "selective")}

    def call(batch: int) -> tuple[Any, Any]:
        given = {k: v for k, v in {**knobs, "micro_batch_size": batch}.items() if k in wanted}
        with torch.device("meta"):
            try:
                made = factory(**given)
            except Exception as exc:
                raise Unsupported(f"[model] factory = \"{target}\" failed: {type(exc).__name__}: {exc}") from None
        if not (isinstance(made, tuple) and len(made) == 2):
            raise Unsupported(f"[model] factory = \"{target}\" must return (model, batch), got {type(made).__name__}")
        return made

    model, first_batch = call(int(spec["micro_batch_sizes"][0]))
    if spec["precision"] in ("bf16-true", "fp16-true") or (spec.get("zero") and spec["precision"] in _MIXED):
        model = model.to(_DTYPES[spec["precision"]])  # DeepSpeed's engine casts the module it is given
    if "micro_batch_size" not in wanted:
        notes.append(f"[model] factory = \"{target}\" takes no micro_batch_size: its batch is used as it is")
    first = (int(spec["micro_batch_sizes"][0]), first_batch)

    def make_batch(batch: int) -> Any:
        if batch == first[0] or "micro_batch_size" not in wanted:
            return first[1]
        return call(batch)[1]

    return Job(model, make_batch, notes, checkpoints_itself="gradient_checkpointing" in wanted)


# -- LoRA and checkpointing ------------------------------------------------------------------------

def _lora(model: Any, lora: dict, notes: list[str]) -> Any:
    try:
        import peft
    except ImportError:
        raise Unsupported("peft is not installed in the job's interpreter (needed for lora_rank)") from None
    leaf_names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                  if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"}
    targets = None
    if lora.get("target_names"):
        targets = sorted(leaf_names & set(lora["target_names"]))
        if not targets:
            raise Unsupported(f"none of the LoRA targets ({', '.join(lora['target_names'])}) is a linear layer "
                              f"of this model ({', '.join(sorted(leaf_names))})")
    rank = int(lora["rank"])
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=float(lora.get("dropout") or 0.0),
                             target_modules=targets)
    # peft upcasts half adapters to fp32 (autocast_adapter_dtype); a framework's own LoRA layers
    # (torchtune's, LitGPT's) stay in the model's dtype, as peft's do without that cast.
    own = lora.get("adapters") == "own"
    try:
        model = peft.get_peft_model(model, config, autocast_adapter_dtype=not own)
    except ValueError as exc:
        raise Unsupported(f"peft cannot wrap this model: {exc}") from None
    wrapped = sorted({n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if ".lora_A" in n})
    dtype = "the model's dtype, as the framework's own LoRA layers" if own else "fp32, as peft keeps them"
    notes.append(f"LoRA rank {rank} on {', '.join(wrapped) or 'no layer'}, adapters in {dtype}")
    return model


def _four_bit(model: Any, spec: dict, notes: list[str]) -> None:
    """transformers' ``load_in_4bit`` and peft's ``prepare_model_for_kbit_training``: the linear layers
    as bitsandbytes' NF4 ``Linear4bit`` (the stand-in of ``kbit``), every other weight in fp32 under
    mixed precision, and an input that requires grad. In an interpreter with torchtune and its torchao
    and without bitsandbytes, NF4 can only be torchtune's (torchao's ``NF4Tensor``): its ``LinearNF4``
    stand-in; so it is where the profile names the job's torchao (``[estimate] torchao``: an estimate
    made in another interpreter than the job's)."""
    if spec["quantization"] != "nf4" or spec.get("factory"):
        raise Unsupported(f"quantization = \"{spec['quantization']}\"" + (
            " with a [model] factory: the factory's own code quantizes" if spec.get("factory") else
            ": only NF4 layers (bitsandbytes' and torchtune's) have a stand-in on meta (8-bit ones do not)"))
    from importlib.util import find_spec

    from .kbit import quantize_linears

    compute = _DTYPES.get(spec["precision"], torch.float32)
    stated = spec.get("torchao")
    torchao = stated is not None or (
        find_spec("bitsandbytes") is None and None not in (find_spec("torchtune"), find_spec("torchao")))
    count = quantize_linears(model, compute, torchao=torchao)
    if spec["precision"] in _MIXED:
        for param in model.parameters():
            if param.dtype in (torch.float16, torch.bfloat16):
                param.data = param.data.to(torch.float32)
    if hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()
    why = f"[estimate] torchao = {stated}" if stated else "bitsandbytes is not installed"
    kind = f"torchtune's NF4 (torchao's NF4Tensor; {why})" if torchao else "bitsandbytes' NF4 Linear4bit"
    notes.append(f"4-bit: {count} linear layers as {kind} (double quantization, "
                 f"computing in {str(compute).replace('torch.', '')})")


def _checkpointing(model: Any, spec: dict, notes: list[str]) -> None:
    if spec["gradient_checkpointing"] == "selective":
        raise Unsupported("selective checkpointing has no switch in transformers: the policy is the job's own "
                          "(a [model] factory that takes gradient_checkpointing applies it)")
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise Unsupported("gradient_checkpointing is on but the model has no gradient_checkpointing_enable(): "
                          "how the job checkpoints is its own code")
    enable()
    if spec.get("lora") and hasattr(model, "enable_input_require_grads"):
        # Frozen embeddings: checkpointed blocks need an input that requires grad (the HF Trainer and
        # peft's prepare_model_for_kbit_training do this).
        model.enable_input_require_grads()


# -- the optimizer -----------------------------------------------------------------------------------

def optimizer(spec: dict, params: list) -> tuple[Any, str]:
    """The optimizer and how its step runs: foreach (torch's CUDA default: whole-list temporaries),
    forloop, or fused (no temporaries: simulated as forloop with temporaries not counted)."""
    name, impl = spec["optimizer"], spec.get("optimizer_impl") or "foreach"
    foreach = impl == "foreach"
    if name in ("adamw", "adam"):
        cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        return cls(params, lr=1e-4, foreach=foreach), impl
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=float(spec.get("momentum", 0.9)), foreach=foreach), impl
    if name == "adafactor":
        try:
            from transformers.optimization import Adafactor
        except ImportError:
            return torch.optim.Adafactor(params, lr=1e-3, foreach=foreach), impl
        # The HF Trainer's `--optim adafactor`.
        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False), "forloop"
    raise Unsupported(f"optimizer = \"{name}\" keeps its states in custom CUDA kernels (bitsandbytes and "
                      "friends have no meta implementation)")
