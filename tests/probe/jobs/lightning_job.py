"""A Lightning job on one CPU process: the Trainer accumulates gradients and trains under bf16
autocast, settings only the Trainer holds (the script's loop is Lightning's own). A third argument
``oom`` raises a real ``torch.OutOfMemoryError`` in the first micro batch, before any step."""

import sys

import lightning.pytorch as pl
import torch
from torch import nn


def out_of_memory(*_):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * 8, 100))

    def training_step(self, batch, batch_idx):
        if sys.argv[3:] == ["oom"]:  # inside the forward, as a kernel's allocation fails
            self.net[2].register_forward_pre_hook(out_of_memory)
        return self.net(batch).float().logsumexp(-1).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


torch.manual_seed(0)
data = torch.utils.data.DataLoader(torch.randint(100, (64, 8)), batch_size=int(sys.argv[1]))
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=2, accumulate_grad_batches=int(sys.argv[2]),
                     precision="bf16-mixed", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
trainer.fit(Tiny(), data)
