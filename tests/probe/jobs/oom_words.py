"""CUDA's out-of-memory error as torch words it, its request sized from the input that did not fit
(a machine with no GPU cannot run out of GPU memory by itself): the jobs raise it inside the phase
under test, where a kernel's allocation fails."""

import torch


def out_of_memory(tokens: int) -> None:
    asked = 4 * tokens  # MiB: 4 MiB of activations per token of the micro batch
    raise torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {asked:.2f} MiB. GPU 0 has a total capacity of 23.68 GiB of which "
        f"{asked / 2:.2f} MiB is free. Including non-PyTorch memory, this process has 22.10 GiB memory in use. Of "
        "the allocated memory 21.30 GiB is allocated by PyTorch, and 18.50 MiB is reserved by PyTorch but "
        "unallocated.")
