"""The estimate section's training steps: two model families built from their transformers configs, in
the regimes users train them in, each written as the profile its user would write (only the SPEC's
keys, the model as ``hf_config = "config.json"``) for ``gpudoc estimate``.

The cases keep to micro batches 1-8 and sequences 512-2048, and fit an 80 GB card with room to spare:
the largest (a 1.2B model's full fine-tune with 128k-token logits at 8 x 2048) allocates about 45 GB.
"""

from __future__ import annotations

import json
from pathlib import Path

# GPT-2 small as transformers defines it (124M parameters, tied embeddings).
GPT2 = {"model_type": "gpt2", "config": {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
                                         "n_head": 12}}
# A Llama-style 1B: Llama 3.2 1B's shapes (1.24B parameters, grouped-query attention, tied embeddings).
LLAMA_1B = {"model_type": "llama", "config": {"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16,
                                              "num_attention_heads": 32, "num_key_value_heads": 8,
                                              "intermediate_size": 8192, "max_position_embeddings": 2048,
                                              "tie_word_embeddings": True}}

# (name, model, precision, gradient checkpointing, LoRA rank, sequence, micro batch)
_GRID = (
    ("gpt2-fp32-s1024-mb4", GPT2, "fp32", False, 0, 1024, 4),
    ("gpt2-bf16-s1024-mb8", GPT2, "bf16", False, 0, 1024, 8),
    ("gpt2-bf16-ckpt-s1024-mb8", GPT2, "bf16", True, 0, 1024, 8),
    ("gpt2-bf16true-s1024-mb8", GPT2, "bf16-true", False, 0, 1024, 8),
    ("llama1b-bf16-s2048-mb1", LLAMA_1B, "bf16", False, 0, 2048, 1),
    ("llama1b-bf16-s2048-mb2", LLAMA_1B, "bf16", False, 0, 2048, 2),
    ("llama1b-bf16-ckpt-s2048-mb8", LLAMA_1B, "bf16", True, 0, 2048, 8),
    ("llama1b-bf16true-s1024-mb4", LLAMA_1B, "bf16-true", False, 0, 1024, 4),
    ("llama1b-bf16true-ckpt-s2048-mb4", LLAMA_1B, "bf16-true", True, 0, 2048, 4),
    ("llama1b-lora-bf16-s2048-mb4", LLAMA_1B, "bf16", False, 16, 2048, 4),
    ("llama1b-lora-bf16-ckpt-s2048-mb8", LLAMA_1B, "bf16", True, 16, 2048, 8),
    ("llama1b-lora-bf16true-s512-mb8", LLAMA_1B, "bf16-true", False, 16, 512, 8),
)
# The two full fine-tunes of the OOM chain's model that differ only in the micro batch: their
# difference is one sample's memory, from which the chain sizes its first micro batch.
PER_SAMPLE_PAIR = ("llama1b-bf16-s2048-mb1", "llama1b-bf16-s2048-mb2")
STEPS = 3


def cases() -> list[dict]:
    return [{"id": name, "model_type": model["model_type"], "config": model["config"], "precision": precision,
             "gradient_checkpointing": checkpointing, "lora_rank": lora, "max_seq_len": seq,
             "micro_batch_size": micro, "steps": STEPS}
            for name, model, precision, checkpointing, lora, seq, micro in _GRID]


def profile_toml(case: dict) -> str:
    """The profile this run's user writes: the SPEC's keys, nothing tuned to the measurement."""
    train = [
        f"micro_batch_size = {case['micro_batch_size']}",
        "gradient_accumulation_steps = 1",
        f"max_seq_len = {case['max_seq_len']}",
        f"gradient_checkpointing = {'true' if case['gradient_checkpointing'] else 'false'}",
        f"precision = {json.dumps(case['precision'])}",
        'optimizer = "adamw"',
        'attention = "sdpa"',
    ]
    if case["lora_rank"]:
        train.append(f"lora_rank = {case['lora_rank']}")
    return "\n".join([f"description = {json.dumps('GPU kit: ' + case['id'])}", "[train]", *train,
                      "[launch]", "nproc_per_node = 1", "[model]", 'hf_config = "config.json"']) + "\n"


def write_case(case: dict, directory: Path) -> Path:
    """The case's project directory: its ``gpudoc.toml`` and the model's ``config.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "gpudoc.toml").write_text(profile_toml(case))
    (directory / "config.json").write_text(json.dumps({"model_type": case["model_type"], **case["config"]}))
    return directory
