"""A stand-in training job for end-to-end tests: reads its knobs from the environment the way
`gpudoc run` exports them, and fails with a real-format PyTorch OOM while its micro batch does not
fit a pretend 16 GB card (4 GiB fixed + 3 GiB per sample; FAKE_GPU_BUDGET_GIB overrides 15.57)."""

import os
import sys

GIB = 1024**3
capacity = 15.57
budget = float(os.environ.get("FAKE_GPU_BUDGET_GIB", capacity))
micro = int(os.environ.get("GPUDOC_MICRO_BATCH_SIZE", "1"))
accum = int(os.environ.get("GPUDOC_GRADIENT_ACCUMULATION_STEPS", "1"))
need = 4 + 3 * micro

print(f"micro_batch_size={micro} gradient_accumulation_steps={accum} "
      f"alloc_conf={os.environ.get('PYTORCH_CUDA_ALLOC_CONF') or os.environ.get('PYTORCH_ALLOC_CONF')}", flush=True)
if need > budget:
    allocated = budget - 0.9
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "train.py", line 42, in <module>', file=sys.stderr)
    print("    loss.backward()", file=sys.stderr)
    print(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {3 * micro / 4:.2f} GiB. "
        f"GPU 0 has a total capacity of {capacity:.2f} GiB of which 512.00 MiB is free. "
        f"Including non-PyTorch memory, this process has {allocated + 0.4:.2f} GiB memory in use. "
        f"Of the allocated memory {allocated:.2f} GiB is allocated by PyTorch, and 20.00 MiB is reserved "
        "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
        "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        file=sys.stderr,
    )
    sys.exit(1)
for step in range(3):
    print(f"step {step} loss {2.5 - step * 0.1:.3f}", flush=True)
