"""The published measurements (tests/fixtures/memory/cases.jsonl) through the user's path: each case
becomes a profile TOML written the way its user would write it — only the keys the SPEC gives a
profile, only what the case's structured fields say (among them optimizer_in_backward, the LoRA targets
the job's config lists, a torchtune job's loss as its config says it, and ``[bind] args`` naming the
framework whose own scripts ran the job; the free-text notes and the
dropout or CUDA context they mention are facts a profile does not carry) — and runs through
``gpudoc estimate --json`` (the command function, in-process), with or without ``--simulate``.
The rows measured with LitGPT's scripts also get what their user has: a ``[model] factory`` building
LitGPT's model and step (``jobs/litgpt_lora.py``), and LitGPT in the interpreter.

Nothing here is tuned per case: every line of a profile reads a field of the record.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from gpudoc.commands.estimate import estimate_command
from tests.conftest import captured_workspace
from tests.estimate.cases import UNITS, _checkpointing, _optimizer, _precision, loss_of, stack_releases
from tests.facts.fake_nvml import FakeNvml

# NVML_ERROR_DRIVER_NOT_LOADED: no GPU is visible, wherever the test runs, so no card's capacity
# creeps into the estimate (the simulation would otherwise search for the largest micro batch).
_NO_DRIVER = 9
_SNAPSHOT = Path(__file__).resolve().parent.parent / "fixtures" / "real" / "nvidia-smi"

# The model family each case's model belongs to, for the per-family table (first match wins).
_FAMILIES = (("gpt-2", "gpt2"), ("bert", "bert"), ("phi", "phi"), ("stablelm", "gpt-neox"),
             ("llama", "llama"), ("t0_3b", "t5"), ("mt0", "t5"), ("t5", "t5"), ("bloom", "bloom"))


def family(r: dict) -> str:
    name = (r["model"] or "").lower()
    return next((fam for key, fam in _FAMILIES if key in name), r["arch"])


def config_json(r: dict) -> dict:
    """The model's ``config.json``, as its family's transformers config class writes it (every field,
    its defaults included, as on the Hub), with the case's shapes."""
    from transformers import AutoConfig

    fam, seq = family(r), int(r["seq_len"] or r["seq_len_max_hint"])
    h, layers, heads, ffn, vocab = r["hidden"], r["n_layers"], r["n_heads"], r["ffn_hidden"], r["vocab"]
    tied = bool(r["tied_embeddings"])
    if fam == "gpt2":
        fields = {"n_embd": h, "n_layer": layers, "n_head": heads, "n_inner": ffn, "n_positions": max(1024, seq)}
    elif fam == "bloom":
        fields = {"hidden_size": h, "n_layer": layers, "n_head": heads}
    elif fam == "t5":
        fields = {"d_model": h, "d_ff": ffn, "num_layers": layers // 2, "num_decoder_layers": layers - layers // 2,
                  "num_heads": heads, "d_kv": h // heads, "feed_forward_proj": "gated-gelu",
                  "decoder_start_token_id": 0}
    else:
        fields = {"hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
                  "intermediate_size": ffn, "max_position_embeddings": max(2048, seq)}
        if fam == "llama":
            fields["num_key_value_heads"] = r["n_kv_heads"]
    if r["mlp"] == "gelu" and fam != "bloom":  # the case's MLP: exact GELU (the config classes default
        fields["activation_function" if fam == "gpt2" else "hidden_act"] = "gelu"  # to tanh forms)
    model_type = {"phi": "phi", "gpt-neox": "gpt_neox", "bert": "bert", "llama": "llama"}.get(fam, fam)
    return {**AutoConfig.for_model(model_type, vocab_size=vocab, tie_word_embeddings=tied, **fields).to_dict(),
            "model_type": model_type}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def profile_toml(r: dict, *, with_config: bool = True) -> str:
    """The profile a user of this run writes: SPEC keys only, from the record's structured fields;
    the model as ``hf_config = "config.json"`` (``config_json``), or by its shapes alone."""
    par = r["parallelism"] or {}
    world = int(par.get("world_size") or 1)
    precision, _ = _precision(r)
    optimizer, paged, in_backward = _optimizer(r)
    loss, _ = loss_of(r)
    quant = (r.get("quantization") or "").lower()
    strategy = (par.get("strategy") or "").lower()
    fsdp = "fsdp" in strategy  # torch's FSDP (FULL_SHARD): the SPEC's `fsdp = true`, never DeepSpeed's ZeRO-3
    zero = 0 if fsdp else int(par.get("zero_stage") or 0)
    micro, accumulation = int(r["micro_batch"]), int(r["grad_accum"] or 1)
    if int(par.get("pp") or 1) > 1:
        # A pipeline splits the local batch into its micro batches (torchtitan's default pipeline
        # micro batch is 1): gpudoc counts them, as DeepSpeed's pipeline engine does, as accumulation.
        micro, accumulation = 1, micro * accumulation
    train: dict[str, object] = {
        "micro_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "max_seq_len": int(r["seq_len"] or r["seq_len_max_hint"]),
        "gradient_checkpointing": {"none": False, "full": True}.get(_checkpointing(r), "selective"),
        "precision": precision,
        "optimizer": optimizer,
        # bitsandbytes' paged states live in CUDA unified memory, outside the pool the peak counts.
        "offload_optimizer": paged or bool(par.get("cpu_offload")),
        "attention": "eager" if "eager" in (r["attention_impl"] or "").lower() else "sdpa",
    }
    if fsdp and world > 1:
        train["fsdp"] = True
    elif zero and world > 1:
        train["zero_stage"] = zero
    if in_backward:  # torchtune's optimizer_in_bwd: each gradient stepped and freed in backward
        train["optimizer_in_backward"] = True
    if r.get("compile"):  # the job's blocks run under torch.compile (torchtitan's --training.compile)
        train["compile"] = True
    if loss == "classification" or (loss != "lm" and (r["source"] or "").startswith("torchtune")):
        # A classifier's head is the model its user trains, whatever the framework; the loss's form is
        # what gpudoc reads from a torchtune job's config (loss._component_), and no other framework's
        # config that gpudoc reads names it.
        train["loss"] = loss
    if r.get("lora"):
        train["lora_rank"] = int(r["lora"]["rank"])
        if isinstance(r["lora"].get("targets"), list):  # the layers the job's config names ("default": none)
            train["lora_targets"] = [str(t) for t in r["lora"]["targets"]]
        if r["lora"].get("dropout") is not None:  # the adapters' dropout, where the record states it
            train["lora_dropout"] = float(r["lora"]["dropout"])
    if "nf4" in quant:
        train["quantization"] = "nf4"
    launch = {"nproc_per_node": min(world, 8), "nnodes": max(1, world // 8)}
    for key, field in (("tensor_parallel", "tp"), ("pipeline_parallel", "pp"), ("context_parallel", "cp")):
        if int(par.get(field) or 1) > 1:
            launch[key] = int(par[field])
    model: dict[str, object] = {"hf_config": "config.json", "params": int(r["params"])} if with_config else {
        "arch": r["arch"], "params": int(r["params"]), "layers": int(r["n_layers"]), "hidden": int(r["hidden"]),
        "heads": int(r["n_heads"]), "kv_heads": int(r["n_kv_heads"]), "ffn": int(r["ffn_hidden"]),
        "vocab": int(r["vocab"]), "tied_embeddings": bool(r["tied_embeddings"])}
    if with_config and is_litgpt(r):
        model["factory"] = "litgpt_lora:build"  # LitGPT's own model and step (``litgpt_job``)
    # The framework whose flags the job takes, where its own scripts ran it (its LoRA layers are its own).
    framework = next((name for prefix, name in _FRAMEWORKS if (r["source"] or "").startswith(prefix)), None)
    bind = {"args": framework} if framework else {}
    # The releases the record's software names (their defaults moved memory: ``estimate.stack``).
    estimate = stack_releases(r)
    lines = [f"description = {json.dumps(r['id'])}"]
    for table, keys in (("train", train), ("launch", launch), ("model", model), ("bind", bind),
                        ("estimate", estimate)):
        if not keys:
            continue
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


_FRAMEWORKS = (("torchtune", "torchtune"), ("LitGPT", "litgpt"))  # the record's source -> [bind] args
_LITGPT_JOB = Path(__file__).resolve().parent / "jobs" / "litgpt_lora.py"
# bin/test keeps LitGPT in a directory of its own (its pins contradict the venv's frameworks).
LITGPT_PATH = Path(sys.executable).parent.parent / "litgpt"
# LitGPT's names for LoRA's places, from the record's target names.
_LITGPT_LORA = {"query": "query", "q": "query", "key": "key", "k": "key", "value": "value", "v": "value",
                "projection": "projection", "o": "projection", "mlp": "mlp", "head": "head"}


def is_litgpt(r: dict) -> bool:
    """A run of LitGPT's own scripts: its user's factory builds LitGPT's model, not Hugging Face's."""
    return (r["source"] or "").startswith("LitGPT")


def litgpt_job(r: dict, directory: Path) -> None:
    """The LitGPT user's factory in the project: LitGPT's LoRA step, with the record's model (the
    last part of its name, as LitGPT names its configs) and LoRA settings."""
    lora = r.get("lora") or {}
    places = {_LITGPT_LORA[str(t).lower()] for t in lora.get("targets") or () if str(t).lower() in _LITGPT_LORA}
    settings = {"model": r["model"].rsplit("/", 1)[-1],
                "lora": {"r": int(lora.get("rank") or 8), "alpha": int(lora.get("alpha") or 16),
                         "dropout": float(lora.get("dropout") or 0.0), **dict.fromkeys(places, True)}}
    (directory / _LITGPT_JOB.name).write_text(_LITGPT_JOB.read_text())
    (directory / "litgpt_lora.json").write_text(json.dumps(settings))


@dataclass(frozen=True)
class Result:
    """One case through ``gpudoc estimate --json``: the prediction on the measurement's footing."""

    id: str
    family: str
    kind: str  # allocated | reserved | smi | boundary | oom
    predicted: float
    measured: float | None  # bytes; the card's capacity for boundaries
    capacity: float | None
    source: str
    notes: tuple[str, ...]

    @property
    def error(self) -> float | None:
        return None if self.measured is None else (self.predicted - self.measured) / self.measured


def run_case(r: dict, directory: Path, *, simulate: bool = False, with_config: bool = True) -> Result:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "gpudoc.toml").write_text(profile_toml(r, with_config=with_config))
    if with_config:
        (directory / "config.json").write_text(json.dumps(config_json(r)))
        if is_litgpt(r):
            litgpt_job(r, directory)
    environ = {}
    if simulate and with_config and is_litgpt(r):
        assert (LITGPT_PATH / "litgpt").is_dir(), f"{LITGPT_PATH}: missing; ./bin/test installs LitGPT there"
        environ["PYTHONPATH"] = str(LITGPT_PATH)  # the LitGPT user's interpreter has LitGPT
    backend = FakeNvml.from_snapshot(next(iter(sorted(_SNAPSHOT.rglob("*.xml")))), init_error=_NO_DRIVER)
    ws = captured_workspace(directory, environ=environ, nvml_backend=backend)
    extra = {"simulate": True, "python": sys.executable} if simulate else {}
    estimate_command(ws, as_json=True, **extra)
    doc = json.loads(ws.console.out.getvalue())
    assert doc.get("status") != "error", doc
    metric = (r["metric"] or "").lower()
    peak, slack, total = float(doc["peak_bytes"]), float(doc["slack_bytes"]), float(doc["total_bytes"])
    measured = r["measured_peak_value"] * UNITS[r["measured_peak_unit"]] if r["measured_peak_value"] else None
    capacity = r["gpu_memory_gib_nominal"] * 1024**3 if r.get("gpu_memory_gib_nominal") else None
    if r["outcome"] == "oom":
        kind, predicted = "oom", total
    elif r["outcome"] == "boundary":
        kind, predicted, capacity = "boundary", total, measured
    elif "nvidia-smi" in metric or "nvml" in metric:
        kind, predicted = "smi", total
    elif "reserved" in metric:
        kind, predicted = "reserved", peak + slack
    else:
        kind, predicted = "allocated", peak
    return Result(r["id"], family(r), kind, predicted, measured, capacity, doc["source"], tuple(doc["notes"]))


def summary(results: list[Result]) -> dict:
    """Median |error|, share within 25% and the count under-predicted by more than 10%."""
    errors = [x.error for x in results if x.error is not None]
    if not errors:
        return {"n": 0, "median": None, "within25": None, "under10": 0, "mean": None}
    return {"n": len(errors), "median": statistics.median(abs(e) for e in errors),
            "within25": sum(abs(e) <= 0.25 for e in errors) / len(errors),
            "under10": sum(e < -0.10 for e in errors), "mean": statistics.fmean(errors)}


def table(title: str, results: list[Result]) -> str:
    """Per family: each case's error, then the family's and the whole method's summary."""
    lines = [f"== {title}", f"{'case':<12} {'metric':<9} {'source':<10} {'predicted':>10} {'measured':>10} {'error':>8}"]
    for fam in sorted({x.family for x in results}):
        rows = [x for x in results if x.family == fam]
        for x in rows:
            if x.error is None:
                verdict = "OOM ok" if x.capacity and x.predicted > x.capacity else "OOM MISSED"
                lines.append(f"{x.id:<12} {x.kind:<9} {x.source:<10} {x.predicted / 1e9:>9.2f}G "
                             f"{(x.capacity or 0) / 1e9:>9.2f}G {verdict:>10}")
            else:
                lines.append(f"{x.id:<12} {x.kind:<9} {x.source:<10} {x.predicted / 1e9:>9.2f}G "
                             f"{x.measured / 1e9:>9.2f}G {100 * x.error:>+7.1f}%")
        lines.append(_summary_line(f"  {fam}", rows))
    lines.append(_summary_line("all", results))
    return "\n".join(lines)


def _summary_line(label: str, results: list[Result]) -> str:
    s = summary(results)
    if not s["n"]:
        return f"{label}: no measured figure"
    return (f"{label}: n={s['n']} median |error| {100 * s['median']:.1f}%, mean {100 * s['mean']:+.1f}%, "
            f"within 25% {100 * s['within25']:.0f}%, under by >10%: {s['under10']}")
