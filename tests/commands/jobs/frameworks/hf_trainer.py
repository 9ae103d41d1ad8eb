"""A real HF Trainer job: a tiny GPT-2 built from a config, the Trainer's own flags (HfArgumentParser)."""

import os

import torch
from oom import guard
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        ids = (torch.arange(16) + i) % 64
        return {"input_ids": ids, "labels": ids}


def main():
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    if os.environ.get("HARD_CODED_BATCH"):  # a script that overrides its own flag, as seed users' scripts do
        args.per_device_train_batch_size = int(os.environ["HARD_CODED_BATCH"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    guard(model)
    # As the HF example scripts do: the Trainer's own --resume_from_checkpoint is the script's to pass.
    Trainer(model=model, args=args, train_dataset=Tokens()).train(resume_from_checkpoint=args.resume_from_checkpoint)
    if torch.distributed.is_initialized():  # as the HF examples do: a clean gloo teardown at exit
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
