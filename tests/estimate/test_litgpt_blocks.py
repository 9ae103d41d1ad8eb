"""A LitGPT job's blocks are counted as LitGPT's own code keeps them (``gpudoc.estimate.litgpt_blocks``),
checked against autograd on a stand-in written the way ``litgpt/model.py`` and ``litgpt/lora.py`` are:
one fused q/k/v linear whose output v stays a view of, rope making new q and k, and LoRA on q and v as
one adapter over the fused linear whose update ``index_copy`` places."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpudoc.estimate import litgpt_blocks
from gpudoc.estimate.inputs import ModelShape, TrainSetup
from gpudoc.estimate.model import layer_activation_bytes
from tests.estimate.test_model import RMSNorm, saved_bytes

B, T, H, HEADS, FFN, RANK = 2, 128, 256, 4, 688, 8
SHAPE = ModelShape(layers=1, hidden=H, heads=HEADS, kv_heads=HEADS, ffn=FFN, vocab=1, params=1, gated_mlp=True)


class LitGPTLoraBlock(nn.Module):
    """A LitGPT Llama block with LoRA on query and value, frozen but for the adapters. Its rope tables
    are frozen parameters here (buffers in LitGPT), so that ``saved_bytes`` leaves them out as weights."""

    def __init__(self) -> None:
        super().__init__()
        hd = H // HEADS
        self.norm_1, self.norm_2 = RMSNorm(H), RMSNorm(H)
        self.attn, self.proj = nn.Linear(H, 3 * H, bias=False), nn.Linear(H, H, bias=False)
        self.lora_A = nn.Parameter(torch.zeros(2 * RANK, H))  # one A over the fused input, r rows per part on
        self.lora_B = nn.Parameter(torch.zeros(2 * H, 2 * RANK))
        # The fused output is laid out per head as (q, k, v): the positions of q's and v's columns.
        self.lora_ind = nn.Parameter(torch.tensor([i for i in range(3 * H) if (i // hd) % 3 != 1]), requires_grad=False)
        self.cos = nn.Parameter(torch.ones(T, hd), requires_grad=False)
        self.sin = nn.Parameter(torch.ones(T, hd), requires_grad=False)
        self.fc_1, self.fc_2 = nn.Linear(H, FFN, bias=False), nn.Linear(H, FFN, bias=False)
        self.mlp_proj = nn.Linear(FFN, H, bias=False)
        for p in self.parameters():
            p.requires_grad_(False)
        self.lora_A.requires_grad_(True)
        self.lora_B.requires_grad_(True)

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(x, self.lora_A), self.lora_B)  # LoRAQKVLinear: no dropout
        lora = x.new_zeros(*x.shape[:-1], 3 * H).index_copy(-1, self.lora_ind, update)  # zero_pad
        return self.attn(x) + lora * 2.0

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        half = x.size(-1) // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (x * self.cos + rotated * self.sin).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd = H // HEADS
        qkv = self._qkv(self.norm_1(x)).view(b, t, HEADS, 3, hd).permute(0, 2, 3, 1, 4)
        q, k, v = qkv.split((1, 1, 1), dim=2)
        q, k, v = (z.reshape(b, -1, t, hd) for z in (q, k, v))  # v: a view of the fused output
        q, k = (torch.cat((self._rope(z), z[..., hd:]), dim=-1) for z in (q, k))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, H)
        x = x + self.proj(y)
        n = self.norm_2(x)
        return x + self.mlp_proj(F.silu(self.fc_1(n)) * self.fc_2(n))


def _setup(framework: str | None) -> TrainSetup:
    return TrainSetup(micro_batch_size=B, seq_len=T, precision="bf16-true", attention="sdpa", lora_rank=RANK,
                      lora_targets=("q", "v"), lora_adapters="own", framework=framework)


def test_a_litgpt_block_keeps_its_fused_qkv_output_and_the_lora_update_it_places():
    block = LitGPTLoraBlock().to(torch.bfloat16)
    x = torch.randn(B, T, H, dtype=torch.bfloat16, requires_grad=True)
    litgpt = layer_activation_bytes(SHAPE, _setup("litgpt"), tokens=B * T, batch=B)[0]
    # A's output is 2 x r wide in LitGPT (r rows per part on), r in the formula: a few KiB.
    assert litgpt == pytest.approx(saved_bytes(block, x), abs=B * T * RANK * 2)
    # The Hugging Face block of the same shapes: v of its own, an adapter each on q and v, no update kept.
    hf = layer_activation_bytes(SHAPE, _setup(None), tokens=B * T, batch=B)[0]
    assert litgpt - hf == pytest.approx(B * T * (2 * H * 2 + 2 * H * 2) - B * T * RANK * 2)


def test_litgpts_q_k_and_v_are_one_fused_layer_with_one_adapter_and_the_rest_their_own():
    setup = replace(_setup("litgpt"), lora_targets=("q", "v", "o", "gate"))
    assert litgpt_blocks.lora_modules(setup) == (("q", "v"), ("o",), ("gate",))
    assert litgpt_blocks.lora_modules(replace(setup, framework="torchtune")) == (("q",), ("v",), ("o",), ("gate",))


def test_grouped_key_heads_are_repeated_and_all_of_q_k_v_on_keep_no_update():
    """With fewer key heads than query heads LitGPT repeats k and v to every query head before attention
    (``repeat_interleave``: copies, v no longer a view of the fused output); with q, k and v all on,
    ``zero_pad`` returns the update as it is, and nothing of it is kept."""
    gqa = replace(SHAPE, kv_heads=1)
    all_on = replace(_setup("litgpt"), lora_targets=("q", "k", "v"))
    extra = litgpt_blocks.saved_beyond_bytes(gqa, all_on, tokens=B * T, act_bytes=2, update_bytes=2)
    assert extra == B * T * 2 * (H - H // HEADS) * 2
    assert litgpt_blocks.saved_beyond_bytes(SHAPE, _setup(None), tokens=B * T, act_bytes=2, update_bytes=2) == 0.0
