"""A Hydra job whose batch comes from a config group (`trainer=big` on the command line picks
another file than the default), trained by a plain loop on one CPU process. `+oom_in=backward` runs out
of memory in the first backward: Hydra catches the error, prints it and exits 1."""

import functools

import hydra
import torch
from omegaconf import DictConfig
from oom_words import out_of_memory
from torch import nn


@hydra.main(version_base=None, config_path="hydra_conf", config_name="config")
def main(cfg: DictConfig) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * cfg.seq, 100))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    data = torch.utils.data.DataLoader(torch.randint(100, (64, cfg.seq)), batch_size=cfg.trainer.batch_size)
    for step, x in enumerate(data):
        out = model(x)
        if cfg.get("oom_in") == "backward":
            out.register_hook(functools.partial(lambda tokens, _: out_of_memory(tokens), x.numel()))
        out.logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step + 1 >= cfg.trainer.steps:
            break


main()
