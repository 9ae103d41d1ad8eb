"""Train the example Mamba LM on random tokens, its knobs from gpudoc's GPUDOC_* environment.

    GPUDOC_MICRO_BATCH_SIZE, GPUDOC_MAX_SEQ_LEN, GPUDOC_GRADIENT_CHECKPOINTING, GPUDOC_STEPS
"""

import os

import torch
from model import build


def main() -> int:
    batch = int(os.environ.get("GPUDOC_MICRO_BATCH_SIZE", "2"))
    seq = int(os.environ.get("GPUDOC_MAX_SEQ_LEN", "64"))
    model, _ = build(batch, seq)
    if os.environ.get("GPUDOC_GRADIENT_CHECKPOINTING", "false").lower() in ("true", "1"):
        model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(int(os.environ.get("GPUDOC_STEPS", "2"))):
        ids = torch.randint(0, model.embedding.num_embeddings, (batch, seq))
        loss = model(ids, ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step}: loss {loss.item():.3f} micro_batch_size={batch} max_seq_len={seq}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
