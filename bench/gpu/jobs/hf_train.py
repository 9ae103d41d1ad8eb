"""An HF Trainer job as its users write one: ``HfArgumentParser`` over the model's own dataclass and
``TrainingArguments``, a Llama-style model built from its config with random weights on the device
(nothing downloaded), random token ids as the data set. The kit launches it with a micro batch that
cannot fit and lets ``gpudoc run --retry-oom`` find one that does.

    python3 hf_train.py --output_dir out --per_device_train_batch_size 32 --max_steps 2 --bf16 ...
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    hidden_size: int = 2048
    num_hidden_layers: int = 16
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    intermediate_size: int = 8192
    vocab_size: int = 128256
    max_seq_length: int = 2048


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, count: int, length: int, vocab: int) -> None:
        self.count, self.length, self.vocab = count, length, vocab

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(self.vocab, (self.length,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    model_args, args = HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
    config = LlamaConfig(hidden_size=model_args.hidden_size, num_hidden_layers=model_args.num_hidden_layers,
                         num_attention_heads=model_args.num_attention_heads,
                         num_key_value_heads=model_args.num_key_value_heads,
                         intermediate_size=model_args.intermediate_size, vocab_size=model_args.vocab_size,
                         max_position_embeddings=model_args.max_seq_length, tie_word_embeddings=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with device:  # random weights straight on the device: a 1B model's CPU init would take the minute
        model = LlamaForCausalLM(config)
    global_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
    data = RandomTokens(global_batch * max(1, args.max_steps), model_args.max_seq_length, model_args.vocab_size)
    Trainer(model=model, args=args, train_dataset=data).train()


if __name__ == "__main__":
    main()
