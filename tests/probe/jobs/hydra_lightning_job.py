"""Lightning under Hydra: the Trainer's accumulation and the loader's batch come from the config
group the command picks (``trainer=big`` composes another file than the default). The model is the
LightningCLI job's: a forward whose micro batch holds more than ``oom_above`` tokens (0: never) runs
out of memory, sized from the actual input."""

import hydra
import lightning.pytorch as pl
import torch
from lightning_cli_job import Tiny
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="hydra_lightning_conf", config_name="config")
def main(cfg: DictConfig) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randint(100, (64, cfg.seq)), batch_size=cfg.trainer.batch_size)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=cfg.trainer.max_steps, logger=False,
                         accumulate_grad_batches=cfg.trainer.accumulate_grad_batches, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(cfg.seq, cfg.oom_above), data)


if __name__ == "__main__":
    main()
