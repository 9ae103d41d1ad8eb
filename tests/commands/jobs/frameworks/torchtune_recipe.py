"""A torchtune recipe (`tune run torchtune_recipe.py --config cfg.yaml key=value`): torchtune's own
config parsing and overrides, its resolved-config dump, a tiny Llama from its own builder."""

import os
import sys

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from oom import guard
from torchtune import config
from torchtune.models.llama2 import llama2


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    config.log_config(recipe_name="TinyRecipe", cfg=cfg)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(0)
    model = llama2(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32, max_seq_len=16)
    guard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    print(f"torchtune: batch_size={cfg.batch_size} gradient_accumulation_steps={cfg.gradient_accumulation_steps} "
          f"world_size={world}", flush=True)
    for _ in range(cfg.gradient_accumulation_steps):
        tokens = torch.randint(0, 64, (cfg.batch_size, 16))
        logits = model(tokens)
        torch.nn.functional.cross_entropy(logits.reshape(-1, 64), tokens.reshape(-1)).backward()
    opt.step()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(recipe_main())
