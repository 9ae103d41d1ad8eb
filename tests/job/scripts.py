"""Real scripts a job's reading tells apart: the HF Trainer's own shape, and a hand-written loop."""

from __future__ import annotations

from pathlib import Path

# As the HF example scripts (run_clm.py) build their arguments and Trainer.
HF_TRAINER = '''from transformers import HfArgumentParser, Trainer, TrainingArguments


def main():
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    Trainer(model=None, args=args).train()


if __name__ == "__main__":
    main()
'''

# As TRL's examples/scripts/sft.py builds its arguments and trainer (TRL's own config classes).
TRL_SFT = '''from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser


def main(script_args, training_args, model_args):
    trainer = SFTTrainer(model=model_args.model_name_or_path, args=training_args)
    trainer.train()


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)
'''

# A hand-written loop with the flags every training script has, and a model from transformers.
ARGPARSE_LOOP = '''import argparse

import torch
from transformers import AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="out")
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--max_steps", type=int, default=100)
    parser.add_argument("--num_train_epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    opt = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    for _ in range(args.max_steps):
        opt.step()


if __name__ == "__main__":
    main()
'''


def write_hf_script(folder: Path, name: str = "train.py") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HF_TRAINER)
    return path
