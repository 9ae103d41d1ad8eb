"""The one fault these framework jobs share: CUDA's out-of-memory error, worded as torch words it,
raised by the model's first forward when a device's batch is above ``OOM_ABOVE`` samples (a machine
with no GPU cannot run out of GPU memory by itself); with ``OOM_AFTER=N``, only after N forwards
went through (a job that saves a checkpoint, then runs out of memory later)."""

import os

import torch

OOM_ABOVE = int(os.environ.get("OOM_ABOVE", "4"))
OOM_AFTER = int(os.environ.get("OOM_AFTER", "0"))


def guard(model: torch.nn.Module) -> None:
    calls = [0]

    def check(_module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs else None
        batch = (ids if ids is not None else args[0]).shape[0]
        calls[0] += 1
        if batch > OOM_ABOVE and calls[0] > OOM_AFTER:
            asked = 512 * batch
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {asked:.2f} MiB. GPU 0 has a total capacity of 23.68 GiB "
                f"of which {asked / 2:.2f} MiB is free. Including non-PyTorch memory, this process has 22.10 GiB "
                "memory in use. Of the allocated memory 21.30 GiB is allocated by PyTorch, and 18.50 MiB is "
                "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

    model.register_forward_pre_hook(check, with_kwargs=True)
