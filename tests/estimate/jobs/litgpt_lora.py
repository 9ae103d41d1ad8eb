"""A LitGPT LoRA fine-tuning job's step, as a ``[model] factory``: the model of LitGPT's own code
(``litgpt.lora.GPT``) set up by Lightning Fabric in ``bf16-true``, and the step of LitGPT's
``finetune/lora.py`` — the LM head in chunks of 128 tokens and LitGPT's chunked cross-entropy —
with only the LoRA weights trained. Fabric's half-precision wrapper hands the logits back in the
default dtype (fp32): the loss runs on fp32 logits, as in the real job, and they live through backward.

The settings a user would write at the top of their script are read from ``litgpt_lora.json``
beside this file: ``{"model": NAME, "lora": {"r", "alpha", "dropout", "query", "key", "value",
"projection", "mlp", "head"}}``, NAME as LitGPT names its configs (case aside).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lightning.fabric import Fabric
from litgpt.config import name_to_config
from litgpt.lora import GPT, Config, mark_only_lora_as_trainable
from litgpt.utils import chunked_cross_entropy

SETTINGS = json.loads((Path(__file__).with_name("litgpt_lora.json")).read_text())


class LoraStep(torch.nn.Module):
    """forward(input_ids, targets) -> {"loss", "logits"}, as finetune/lora.py computes them: its loop's
    ``logits`` holds the fp32 chunks through ``fabric.backward(loss)``, so they are handed back with the loss."""

    def __init__(self, gpt: GPT) -> None:
        super().__init__()
        fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-true")
        self.gpt = fabric.setup_module(gpt, move_to_device=False)

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor) -> dict:
        logits = self.gpt(input_ids, lm_head_chunk_size=128)
        logits[-1] = logits[-1][..., :-1, :]  # output n predicts token n + 1
        return {"loss": chunked_cross_entropy(logits, targets[..., 1:]), "logits": logits}


def _config_name(wanted: str) -> str:
    names = {name.lower(): name for name in name_to_config}
    for candidate in (wanted.lower(), f"{wanted.lower()}-hf"):
        if candidate in names:
            return names[candidate]
    raise ValueError(f"LitGPT has no config named {wanted!r}")


def build(micro_batch_size: int, max_seq_len: int) -> tuple[torch.nn.Module, dict]:
    lora = SETTINGS["lora"]
    config = Config.from_name(_config_name(SETTINGS["model"]), lora_r=lora["r"], lora_alpha=lora["alpha"],
                              lora_dropout=lora["dropout"],
                              **{f"lora_{part}": bool(lora.get(part)) for part in
                                 ("query", "key", "value", "projection", "mlp", "head")})
    gpt = GPT(config)
    mark_only_lora_as_trainable(gpt)
    shape = (micro_batch_size, max_seq_len)
    return LoraStep(gpt), {"input_ids": torch.zeros(shape, dtype=torch.long),
                           "targets": torch.zeros(shape, dtype=torch.long)}
