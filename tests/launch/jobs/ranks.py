"""A tiny torchrun job (gloo, CPU) whose ranks misbehave on request.

usage: torchrun --nproc_per_node=2 ranks.py MODE MARKER
MODE: ok | raise | oom_exit | oom_block | sigkill | sleep | term_ignore
MARKER is only there so tests can find every process of this job by its command line.
Each rank prints JOB_LINES numbered lines first, so tests can check the log is complete.
"""

import os
import signal
import sys
import time

# The exact shape torch >= 2.5 prints for a caching-allocator OOM.
OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 23.68 GiB of which "
       "1.06 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use. Of the "
       "allocated memory 20.12 GiB is allocated by PyTorch, and 1.98 GiB is reserved by PyTorch but "
       "unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
       "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")



def main() -> None:
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    if mode not in ("sleep", "term_ignore"):  # a rank that only waits to be signalled needs no torch
        import torch
        import torch.distributed as dist

        # Raised through a name that does not spell the error, as in real code (where the failing
        # source line is a matmul): the traceback's source line must not look like the message itself.
        allocator_error = torch.OutOfMemoryError
        dist.init_process_group("gloo")
    for i in range(int(os.environ.get("JOB_LINES", "50"))):
        # One write per line (torchrun runs workers unbuffered; print() would write the text and
        # the newline separately, and two ranks' halves interleave in any shared pipe).
        os.write(1, f"rank{rank} line{i:04d} {'x' * 40}\n".encode())
    if mode == "term_ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.write(1, f"rank{rank} ready\n".encode())
    if mode in ("sleep", "term_ignore"):
        time.sleep(600)
    elif rank == 1 and mode == "raise":
        raise RuntimeError("boom from rank 1")
    elif rank == 1 and mode == "oom_exit":
        raise allocator_error(OOM)
    elif rank == 1 and mode == "oom_block":
        import traceback

        try:
            raise allocator_error(OOM)
        except torch.OutOfMemoryError:
            # As torch prints a worker's error: every line tagged with the rank (JOB_OOM_PREFIX=0:
            # untagged, as a plain print or a logger without torchrun's prefixes writes it).
            tag = f"[rank{rank}]: " if os.environ.get("JOB_OOM_PREFIX", "1") == "1" else ""
            for line in traceback.format_exc().splitlines():
                sys.stderr.write(f"{tag}{line}\n")
            sys.stderr.flush()
        time.sleep(600)  # a rank that hangs after its OOM: only gpudoc's fail-fast ends the job
    elif rank == 1 and mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # rank 0 waits here for rank 1 (blocked in a collective)
    os.write(1, f"rank{rank} done\n".encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
