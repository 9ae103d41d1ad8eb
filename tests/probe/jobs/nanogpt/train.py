"""nanoGPT's train.py shape on one CPU process: module globals as the defaults, overridden by
configurator.py from config files and ``--key=value``; gradient accumulation in its own loop. A
forward whose micro batch holds more than ``oom_above`` tokens (0: never) runs out of memory, as a
kernel's allocation fails, sized from the actual input."""

import torch
from oom_words import out_of_memory
from torch import nn

batch_size = 12
block_size = 16
gradient_accumulation_steps = 4
max_iters = 2
learning_rate = 1e-3
dtype = 'float32'
oom_above = 0
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read())  # noqa: SIM115 - overrides from command line or config file
config = {k: globals()[k] for k in config_keys}  # will be useful for logging
print(f"tokens per iteration will be: {gradient_accumulation_steps * batch_size * block_size:,}", flush=True)

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(64, 16), nn.Flatten(), nn.Linear(16 * block_size, 64))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)


def too_large(*_):
    if oom_above and X.numel() > oom_above:
        out_of_memory(X.numel())


model[2].register_forward_pre_hook(too_large)


def get_batch():
    x = torch.randint(64, (batch_size, block_size))
    return x, x[:, 0]


for it in range(max_iters):
    for _micro_step in range(gradient_accumulation_steps):
        X, Y = get_batch()
        logits = model(X)
        loss = nn.functional.cross_entropy(logits, Y) / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"iter {it}: loss {loss.item() * gradient_accumulation_steps:.4f}", flush=True)
