"""A nanoGPT-style job: its config ``.py`` files and ``--key=value`` flags read as nanoGPT's
configurator does (executed in order), and CUDA's OOM error, worded as torch words it, while the
batch is above ``OOM_ABOVE`` samples. No torch: only the knobs matter here."""

import os
import sys

config = {"batch_size": 12, "gradient_accumulation_steps": 40}
for arg in sys.argv[1:]:
    if arg.endswith(".py"):
        with open(arg, encoding="utf-8") as handle:
            exec(handle.read(), {}, config)
    elif arg.startswith("--") and "=" in arg:
        key, _, value = arg[2:].partition("=")
        config[key] = type(config.get(key, ""))(value) if key in config else value
batch, accum = config["batch_size"], config["gradient_accumulation_steps"]
print(f"nanogpt: batch_size={batch} gradient_accumulation_steps={accum}", flush=True)
if batch > int(os.environ.get("OOM_ABOVE", "16")):
    asked = 512 * batch
    sys.exit(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked:.2f} MiB. GPU 0 has a total "
             f"capacity of 23.68 GiB of which {asked / 2:.2f} MiB is free. Including non-PyTorch memory, this "
             "process has 22.10 GiB memory in use. Of the allocated memory 21.30 GiB is allocated by PyTorch, and "
             "18.50 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
             "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
