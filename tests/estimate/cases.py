"""Turn the published measurements (tests/fixtures/memory/cases.jsonl) into model inputs and
comparable predictions. Every mapping reads a field of the record; nothing here is tuned per case.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from gpudoc.estimate import estimate_inputs
from gpudoc.estimate.inputs import Inputs, ModelShape, TrainSetup
from gpudoc.estimate.stack import Stack, stack_of

MIB = 1024**2
UNITS = {"GB": 1e9, "MB": 1e6, "GiB": 1024**3, "MiB": 1024**2}

# Cases the record harness cannot express, with the reason. Everything else is compared.
EXCLUDED = {
    "titan-13": "tensor + pipeline parallel (TP 8 x PP 8, 1F1B in-flight micro-batches, AsyncTP): this "
                "harness maps no tensor or pipeline degree (the user's path writes them in [launch])",
}

_TARGETS = {
    "q": "q", "q_proj": "q", "query": "q", "k": "k", "k_proj": "k", "key": "k", "v": "v", "v_proj": "v",
    "value": "v", "o": "o", "o_proj": "o", "output_proj": "o", "gate": "gate", "up": "up", "down": "down",
    "output": "head",
}


@dataclass(frozen=True)
class Comparison:
    id: str
    kind: str  # allocated | reserved | smi | boundary | oom
    predicted: float  # bytes, on the same footing as the measurement
    measured: float | None
    capacity: float | None
    peak: float

    @property
    def error(self) -> float | None:
        if self.measured is None:
            return None
        return (self.predicted - self.measured) / self.measured


def load_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _precision(r: dict) -> tuple[str, bool]:
    """(precision knob, engine-sharded) from the record's precision text."""
    text = (r["precision"] or "").lower()
    if text.startswith("fp32"):
        return "fp32", False
    if "bf16_pure" in text or "bf16-true" in text:
        return "bf16-true", False
    if "fsdp" in text or "mixedprecisionpolicy" in text:
        return "bf16", True
    if "fp16" in text:
        return "fp16", False
    return "bf16", False


def _optimizer(r: dict) -> tuple[str, bool, bool]:
    """(optimizer knob, states outside the caching allocator, optimizer in backward)."""
    text = (r["optimizer"] or "").lower()
    paged = "paged" in text  # bitsandbytes paged states live in CUDA unified memory, not torch's pool
    in_bwd = "optimizer_in_bwd" in text
    if "8bit" in text or "8-bit" in text or "adamw_8bit" in text:
        return "adamw_8bit", paged, in_bwd
    if "adafactor" in text:
        return "adafactor", paged, in_bwd
    if "sgd" in text:
        return "sgd", paged, in_bwd
    return "adamw", paged, in_bwd


def _checkpointing(r: dict) -> str:
    text = (r["grad_checkpointing"] or "").lower()
    if text.startswith(("none", "not stated")):
        return "none"
    if "selective" in text:
        return "selective"
    return "full"


def loss_of(r: dict) -> tuple[str, bool]:
    """(``[train] loss``, ``loss_upcast``) from the record's ``loss_impl``: a classification head, the
    chunked loss (also where, with no ``loss_impl``, the record says the source's configs used it), torch's
    CrossEntropyLoss in a torchtune recipe (whose model returns fp32 logits:
    ``gpudoc.frameworks.torchtune.LOSSES``; also where, with no ``loss_impl``, the record's software is a
    torchtune release whose configs all name it), or logits kept in bf16 through the loss."""
    from gpudoc.frameworks.torchtune import LOSSES

    text = (r.get("loss_impl") or "").lower()
    if "classification" in text:
        return "classification", True
    if "chunked" in text:
        return "chunked", True
    if (r["source"] or "").startswith("torchtune") and "nn.crossentropyloss" in text:
        return LOSSES["torch.nn.CrossEntropyLoss"], True
    if not text and "chunked CE" in (r.get("notes") or ""):
        return "chunked", True  # the source says its configs used the default chunked cross-entropy
    release = re.search(r"torchtune\s*~?(\d+)\.(\d+)", (r.get("software") or "").lower())
    if not text and release and (int(release[1]), int(release[2])) <= (0, 2):
        # The loss the job's config names, which gpudoc reads from it (``loss._component_``): up to 0.2 every
        # torchtune config but DPO's names torch.nn.CrossEntropyLoss (52 of 54 at v0.2.1, 33 of 35 at 0217d44c2,
        # the commit of the README table these rows come from).
        return LOSSES["torch.nn.CrossEntropyLoss"], True
    return "lm", "bf16 logits" not in text


def _lora(r: dict) -> tuple[int, tuple[str, ...], float]:
    lora = r.get("lora")
    if not lora:
        return 0, ("q", "v"), 0.0
    targets = lora.get("targets")
    roles: list[str] = []
    if isinstance(targets, list):
        for name in targets:
            name = str(name).lower()
            expanded = ("gate", "up", "down") if name == "mlp" else (_TARGETS.get(name),)
            if name == "mlp" and r.get("mlp") != "swiglu":
                expanded = ("up", "down")
            roles.extend(x for x in expanded if x and x not in roles)
    if not roles:
        roles = ["q", "v"]
    return int(lora["rank"]), tuple(roles), float(lora.get("dropout") or 0.0)


def inputs_for(r: dict) -> Inputs:
    par = r["parallelism"] or {}
    strategy = (par.get("strategy") or "").lower()
    world = int(par.get("world_size") or 1)
    cp = int(par.get("cp") or 1)
    seq = int(r["seq_len"] or r["seq_len_max_hint"])
    if cp > 1:
        seq //= cp  # context parallel: each GPU holds 1/cp of the sequence
    precision, engine = _precision(r)
    optimizer, paged, in_bwd = _optimizer(r)
    fsdp = "fsdp" in strategy
    zero = int(par.get("zero_stage") or 0) or (3 if fsdp else 0)
    rank, targets, lora_dropout = _lora(r)
    quant = (r.get("quantization") or "").lower()
    quant = "nf4" if "nf4" in quant else ("int8" if "int8" in quant else "none")
    attention = "eager" if "eager" in (r["attention_impl"] or "").lower() else "sdpa"
    dropout = 0.1 if "dropout" in (r["attention_impl"] or "").lower() else 0.0
    loss, upcast = loss_of(r)
    arch = r["arch"]
    layers = int(r["n_layers"])
    shape = ModelShape(
        layers=layers, hidden=int(r["hidden"]), heads=int(r["n_heads"]), kv_heads=int(r["n_kv_heads"]),
        ffn=int(r["ffn_hidden"]), vocab=int(r["vocab"]), params=float(r["params"]),
        tied_embeddings=bool(r["tied_embeddings"]), gated_mlp=r["mlp"] in ("swiglu", "gated-gelu", "geglu"),
        norm="layernorm" if r["norm"] == "layernorm" else "rmsnorm", arch=arch,
        encoder_layers=layers // 2 if arch == "encoder-decoder" else 0,
        decoder_layers=layers - layers // 2 if arch == "encoder-decoder" else 0,
    )
    setup = TrainSetup(
        micro_batch_size=int(r["micro_batch"]), seq_len=seq,
        gradient_accumulation_steps=int(r["grad_accum"] or 1),
        gradient_checkpointing=_checkpointing(r), precision=precision,
        zero_stage=zero if world > 1 else 0, fsdp=fsdp or engine, world_size=world,
        offload_optimizer=paged or bool(par.get("cpu_offload")), optimizer=optimizer,
        lora_rank=rank, lora_targets=targets, lora_dropout=lora_dropout, quantization=quant,
        attention=attention, dropout=dropout, loss=loss, loss_upcast=upcast,
        optimizer_in_backward=in_bwd, stack=_stack(r),
    )
    return Inputs(shape=shape, setup=setup)


def stack_releases(r: dict) -> dict[str, str]:
    """The releases the record's software names, as a profile's ``[estimate]`` states them: PyTorch's,
    and torchao's where the record names torchtune 0.1, whose requirements.txt pins ``torchao==0.1``."""
    software = (r.get("software") or "").lower()
    releases = {}
    if torch := re.search(r"(?:pytorch|torch)\s*~?(\d+\.\d+)", software):
        releases["torch"] = torch[1]
    if re.search(r"torchtune\s*~?0\.1\b", software):
        releases["torchao"] = "0.1"
    return releases


def _stack(r: dict) -> Stack:
    """The releases the record's software names, whose defaults apply (``estimate.stack``)."""
    return stack_of(SimpleNamespace(estimate=stack_releases(r)), [])


def _context_bytes(r: dict) -> float:
    """The CUDA context the source measured on its machine, when it did; else the model's."""
    notes = r.get("notes") or ""
    if "1343 MiB after torch.ones" in notes:
        return 1343 * MIB
    return 500 * MIB


def compare(r: dict) -> Comparison:
    est = estimate_inputs(inputs_for(r))
    peak = float(est.peak_bytes)
    metric = (r["metric"] or "").lower()
    unit = UNITS[r["measured_peak_unit"]]
    measured = r["measured_peak_value"] * unit if r["measured_peak_value"] is not None else None
    capacity = r["gpu_memory_gib_nominal"] * 1024**3 if r.get("gpu_memory_gib_nominal") else None
    context = _context_bytes(r)
    if r["outcome"] == "oom":
        return Comparison(r["id"], "oom", peak + est.slack_bytes + context, None, capacity, peak)
    if r["outcome"] == "boundary":
        return Comparison(r["id"], "boundary", peak + est.slack_bytes + context, measured, measured, peak)
    if "nvidia-smi" in metric or "nvml" in metric:
        return Comparison(r["id"], "smi", peak + est.slack_bytes + context, measured, capacity, peak)
    if "reserved" in metric:
        return Comparison(r["id"], "reserved", peak + est.slack_bytes, measured, capacity, peak)
    return Comparison(r["id"], "allocated", peak, measured, capacity, peak)
