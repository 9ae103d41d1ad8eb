"""A real LightningCLI job: its own --config YAML and --section.key flags (jsonargparse)."""

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from oom import guard
from torch.utils.data import DataLoader, TensorDataset


class Regressor(LightningModule):
    def __init__(self, hidden: int = 16):
        super().__init__()
        self.net = torch.nn.Linear(hidden, 1)
        guard(self.net)

    def on_train_start(self):
        # What the Trainer itself resolved, as the job's first line of output.
        t = self.trainer
        print(f"lightning: batch_size={self.trainer.datamodule.batch_size} "
              f"accumulate_grad_batches={t.accumulate_grad_batches} precision={t.precision} "
              f"world_size={t.world_size} global_step={t.global_step}", flush=True)

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Numbers(LightningDataModule):
    def __init__(self, batch_size: int = 8):
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self):
        data = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
        return DataLoader(data, batch_size=self.batch_size)


if __name__ == "__main__":
    # No config.yaml saved into the working directory: a relaunch there would refuse to overwrite it.
    LightningCLI(Regressor, Numbers, save_config_callback=None)
