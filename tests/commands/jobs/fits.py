"""Runs out of GPU memory (a real-format CUDA OOM) unless the micro batch bound by gpudoc is <= 2."""

import os
import sys

mbs = int(os.environ["GPUDOC_MICRO_BATCH_SIZE"])
print(f"micro_batch_size={mbs} alloc={os.environ.get('PYTORCH_ALLOC_CONF', '')}", flush=True)
if mbs > 2:
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        "    loss = model(batch).loss\n"
        # The request grows with the batch, as a real job's does (an OOM that stays the same when the
        # batch halves tells the ladder the memory is not in the activations).
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mbs / 2:.2f} GiB. GPU 0 has a total capacity "
        "of 23.68 GiB of which 2.06 GiB is free. Including non-PyTorch memory, this process has 21.61 GiB "
        "memory in use. Of the allocated memory 21.12 GiB is allocated by PyTorch, and 102.00 MiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")
    sys.exit(1)
print("fits", flush=True)
