"""A LightningCLI job on one CPU process (``fit --config cfg.yaml --trainer.* --data.batch_size``):
jsonargparse parses, the Trainer accumulates. A forward whose micro batch holds more than the
model's ``oom_above`` tokens (0: never) runs out of memory, sized from the actual input."""

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from oom_words import out_of_memory
from torch import nn


class Tiny(LightningModule):
    def __init__(self, seq: int = 8, oom_above: int = 0) -> None:
        super().__init__()
        self.oom_above = oom_above
        self.net = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * seq, 100))
        self.net[2].register_forward_pre_hook(self.too_large)
        self.tokens = 0

    def too_large(self, *_):
        if self.oom_above and self.tokens > self.oom_above:
            out_of_memory(self.tokens)

    def training_step(self, batch, batch_idx):
        self.tokens = batch.numel()
        return self.net(batch).float().logsumexp(-1).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Tokens(LightningDataModule):
    def __init__(self, batch_size: int = 2, seq: int = 8) -> None:
        super().__init__()
        self.batch_size, self.seq = batch_size, seq

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randint(100, (64, self.seq)), batch_size=self.batch_size)


if __name__ == "__main__":
    LightningCLI(Tiny, Tokens, save_config_callback=None)
