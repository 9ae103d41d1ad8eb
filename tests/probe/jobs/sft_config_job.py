"""An HF Trainer job whose arguments are a TRL-style ``TrainingArguments`` subclass with defaults of
its own (TRL's ``SFTConfig`` shape: gradient checkpointing on, a smaller micro batch, accumulation,
a sequence length), parsed by HfArgumentParser and adjusted after the base ``__post_init__``. A tiny
Llama built from its config; a forward whose micro batch holds more than ``--oom_above`` tokens runs
out of memory, as a kernel's allocation fails, sized from the actual input."""

from dataclasses import dataclass, field

import torch
from oom_words import out_of_memory
from transformers import HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


@dataclass
class SFTConfig(TrainingArguments):
    per_device_train_batch_size: int = field(default=4)
    gradient_accumulation_steps: int = field(default=2)
    gradient_checkpointing: bool = field(default=True)
    learning_rate: float = field(default=2e-5)
    max_length: int = field(default=16)
    oom_above: int = field(default=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.gradient_checkpointing_kwargs = {"use_reentrant": False}  # adjusted after the base, as TRL does


class Tokens(torch.utils.data.Dataset):
    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(500, (self.length,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


(args,) = HfArgumentParser(SFTConfig).parse_args_into_dataclasses()
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=1, vocab_size=500, max_position_embeddings=64))


def too_large(_module, _args, kwargs):
    ids = kwargs.get("input_ids")
    if args.oom_above and ids is not None and ids.numel() > args.oom_above:
        out_of_memory(ids.numel())


model.register_forward_pre_hook(too_large, with_kwargs=True)
Trainer(model=model, args=args, train_dataset=Tokens(args.max_length)).train()
