"""A small Mamba language model in plain PyTorch (the selective scan as a loop over time, as
pure-PyTorch Mamba code writes it when the fused CUDA kernels are not installed).

``build`` is the ``[model] factory`` of this example's gpudoc.toml: gpudoc's estimator calls it on
PyTorch's meta device and simulates one training step of this very code, where its formula, made
for attention + MLP blocks, cannot say anything about selective scans.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# The guide's sizes (--model_size small / medium).
CONFIGS = {"small": {"d_model": 512, "n_layers": 8, "d_state": 16, "expand": 2},
           "medium": {"d_model": 768, "n_layers": 16, "d_state": 16, "expand": 2}}
VOCAB = 50257


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MambaBlock(nn.Module):
    def __init__(self, d_model: int, d_state: int, expand: int, d_conv: int = 4) -> None:
        super().__init__()
        d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        x, gate = self.in_proj(x).chunk(2, dim=-1)
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :length].transpose(1, 2))
        dt, b, c = self.x_proj(x).split([self.dt_rank, *2 * [self.A_log.shape[1]]], dim=-1)
        y = self.scan(x, F.softplus(self.dt_proj(dt)), -torch.exp(self.A_log.float()), b, c)
        return self.out_proj(y * F.silu(gate))

    def scan(self, u, delta, a, b, c):
        """h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t;  y_t = C_t h_t + D u_t."""
        decay = torch.exp(delta.unsqueeze(-1) * a)  # (batch, length, d_inner, d_state)
        drive = delta.unsqueeze(-1) * b.unsqueeze(2) * u.unsqueeze(-1)
        state = torch.zeros_like(decay[:, 0])
        ys = []
        for t in range(u.shape[1]):
            state = decay[:, t] * state + drive[:, t]
            ys.append((state @ c[:, t].unsqueeze(-1)).squeeze(-1))
        return torch.stack(ys, dim=1) + u * self.D


class MambaLM(nn.Module):
    def __init__(self, d_model: int, n_layers: int, d_state: int, expand: int, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)  # tied to the output: small logits at the start
        self.layers = nn.ModuleList(MambaBlock(d_model, d_state, expand) for _ in range(n_layers))
        self.norms = nn.ModuleList(RMSNorm(d_model) for _ in range(n_layers))
        self.norm_f = RMSNorm(d_model)
        self.checkpointing = False

    def gradient_checkpointing_enable(self) -> None:
        """Recompute each block in backward (the name Hugging Face models use, which gpudoc calls)."""
        self.checkpointing = True

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids)
        for norm, layer in zip(self.norms, self.layers):
            if self.checkpointing and self.training:
                x = x + checkpoint(lambda h, n=norm, m=layer: m(n(h)), x, use_reentrant=False)
            else:
                x = x + layer(norm(x))
        logits = F.linear(self.norm_f(x[:, :-1]), self.embedding.weight)  # tied; token t predicts t + 1
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))


def build(micro_batch_size: int, max_seq_len: int, size: str = "small") -> tuple[MambaLM, dict]:
    """The model and one batch of token ids: what gpudoc's simulation runs one step of."""
    model = MambaLM(**CONFIGS[size])
    ids = torch.zeros(micro_batch_size, max_seq_len, dtype=torch.long)
    return model, {"ids": ids, "labels": ids}
