"""A real Hydra job: its config composed from conf/ (a defaults group), key=value overrides."""

import os

import hydra
import torch
import torch.distributed as dist
from oom import guard
from torch.utils.data import DataLoader, TensorDataset


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg):
    world = 1
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
        world = dist.get_world_size()
    batch, accum = cfg.data_loader.batch_size, cfg.trainer.accumulate_grad_batches
    print(f"hydra: batch_size={batch} accumulate_grad_batches={accum} world_size={world} "
          f"global_batch={batch * accum * world}", flush=True)
    model = torch.nn.Linear(16, 1)
    guard(model)
    data = DataLoader(TensorDataset(torch.randn(512, 16), torch.randn(512, 1)), batch_size=batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(data):
        torch.nn.functional.mse_loss(model(x), y).backward()
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            break
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
