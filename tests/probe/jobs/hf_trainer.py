"""An HF Trainer job on a tiny Llama built from its config (random weights, random tokens), parsed by
HfArgumentParser as the HF examples do; ``--oom_in_forward`` raises a real ``torch.OutOfMemoryError``
in the first micro batch's forward, before any optimizer step, as a job too large for its GPU does."""

from dataclasses import dataclass

import torch
from transformers import HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


@dataclass
class JobArguments:
    max_seq_length: int = 32
    oom_in_forward: bool = False


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int, length: int) -> None:
        self.count, self.length = count, length

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(500, (self.length,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


job, args = HfArgumentParser((JobArguments, TrainingArguments)).parse_args_into_dataclasses()
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     num_key_value_heads=1, vocab_size=500, max_position_embeddings=64))
if job.oom_in_forward:
    def out_of_memory(*_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    model.model.layers[0].mlp.register_forward_hook(out_of_memory)
Trainer(model=model, args=args, train_dataset=Tokens(256, job.max_seq_length)).train()
