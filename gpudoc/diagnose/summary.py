"""The one sentence that describes a failure, written once, when the log is diagnosed."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.diagnose.signatures import PLAUSIBLE_BYTES
from gpudoc.units import GIB, format_bytes

if TYPE_CHECKING:
    from gpudoc.diagnose.text import Event


def _who(d: Diagnosis) -> str:
    who = f"Rank {d.rank}" if d.rank is not None else "The job"
    if d.host:
        who += f" on {d.host}"
    return who


def summarise(d: Diagnosis, ev: Event) -> str:
    """The sentence for a diagnosis built from the event ``ev`` (its message and signature)."""
    fb = format_bytes
    who = _who(d)
    if d.cause == "gpu_oom":
        backend = {"cuda": "CUDA", "hip": "HIP (ROCm)", "mps": "MPS", "xla": "XLA", "tensorflow": "TensorFlow"}.get(
            d.backend or "", "GPU")
        where = f"GPU {d.gpu_index}" if d.gpu_index is not None else "the GPU"
        s = f"{who} ran out of {backend} memory on {where}"
        if d.requested_bytes is not None:
            s += f": it asked for {fb(d.requested_bytes)}"
            if d.free_bytes is not None:
                s += f" with {fb(d.free_bytes)} free"
                if d.total_bytes is not None:
                    s += f" of {fb(d.total_bytes)}"
        elif ev.m.signature.name == "tf_bfc_stats" and d.total_bytes is not None and d.allocated_bytes is not None:
            s += f" (its allocator's dump: {fb(d.allocated_bytes)} in use of a {fb(d.total_bytes)} limit)"
        elif ev.m.signature.name in ("cuda_lib_alloc", "cuda_lib_init"):
            s += f" ({ev.m.match.group(0)}: a CUDA library could not allocate its workspace)"
        elif ev.m.signature.name == "cuda_error_oom" and _RAW_CUDA.search(ev.m.match.group(0)):
            s += " (a raw CUDA allocation outside PyTorch's allocator failed)"
        elif "Tried to allocate" in ev.line.text:
            s += " (PyTorch's allocator; the message's figures are not numbers)"
        else:
            s += " (the message gives no figures)"
        return s + _gpu_reason(d) + "."
    if d.cause == "host_oom":
        if ev.m.signature.name == "kernel_oom":
            comm = ev.m.fields.get("comm")
            victim = f"process {d.pid}" if d.pid else "a process"
            victim += f" ({comm})" if comm else ""
            return f"The kernel's OOM killer killed {victim}: host RAM ran out."
        if ev.m.signature.name == "dataloader_signal":
            return f"A DataLoader worker (pid {d.pid}) was killed by the kernel: host RAM ran out (fewer workers or smaller prefetch help)."
        if ev.strength == 1:
            return (f"{who} was killed by SIGKILL without an error of its own; the usual sender is the kernel's "
                    "OOM killer (host RAM ran out): check `dmesg`.")
        req = f" ({fb(d.requested_bytes)} requested)" if d.requested_bytes else ""
        return f"{who} ran out of host (CPU) memory{req}: {_clip(_from_match(ev))}."
    if d.cause == "shm":
        disguised = "" if ev.m.cause == "shm" else " (\"No space left on device\" while multiprocessing made its locks)"
        return (f"{who} ran out of shared memory (/dev/shm){disguised}, used by DataLoader workers and NCCL: raise it "
                "(docker --shm-size / --ipc=host) or use fewer workers.")
    if ev.m.signature.name == "device_assert":
        g = ev.m.match.groupdict()
        return (f"{who} failed a CUDA device-side assertion in {g['kernel'].strip()} ({g['file']}:{g['line']}): "
                f"`{_clip(g['expr'], 160)}`; usually an index out of range (a label >= the number of classes, a token "
                "id >= the vocabulary size); CUDA_LAUNCH_BLOCKING=1 shows the Python line.")
    if ev.m.signature.name == "argparse":
        g = ev.m.match.groupdict()
        return f"{who} refused its command line ({g['prog']} exits with status 2): {_clip(g['msg'], 200)}."
    if d.cause == "nccl_timeout":
        detail = ""
        work = ev.m.match.groupdict().get("work")
        if work:
            detail = f" ({work})"
        return (f"{who} hit a collective timeout{detail}: a rank stopped taking part (crashed, hung, or much slower), "
                "so look for the first failure on the other ranks or nodes.")
    if ev.m.peer:
        return (f"{who} lost its connection to another rank ({_clip(ev.line.text, 200)}): that rank died first or "
                "the network failed, and this log does not say which; look at the other ranks' output, or `dmesg` "
                "on their nodes for the OOM killer.")
    if d.cause == "signal":
        sig = d.signal or "a signal"
        return f"{who} was stopped from outside by {sig}: {_clip(_from_match(ev))}."
    return f"{who} failed: {_clip(_from_match(ev))}."


def _from_match(ev: Event) -> str:
    # The line from where the signature starts: drops logger decoration in front of it.
    return ev.line.text[ev.m.match.start():] or ev.line.text


# The CUDA runtime's and driver's own spellings: not PyTorch's allocator talking.
_RAW_CUDA = re.compile(r"cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|Cuda failure|error=2|CUDA error: out of memory",
                       re.IGNORECASE)
# A card with this little left is full, whatever the request: allocations come in blocks of
# 2 MiB and more, and the driver keeps its own share.
_FULL_FRACTION = 0.01
MIB = 1024**2


def segment_bytes(request: int) -> int:
    """What PyTorch's caching allocator asks the driver for to serve ``request`` bytes: a 2 MiB
    block for up to 1 MiB, a 20 MiB segment below 10 MiB, else the request rounded up to 2 MiB."""
    if request <= MIB:
        return 2 * MIB
    if request < 10 * MIB:
        return 20 * MIB
    return -(-request // (2 * MIB)) * 2 * MIB


def _gpu_reason(d: Diagnosis) -> str:
    fb = format_bytes
    req, free, total = d.requested_bytes, d.free_bytes, d.total_bytes
    others = sum(size for _, size in d.other_processes)
    short = max(0, (req or 0) - (free or 0))
    if req is not None and total is not None and req > total:
        return "; the single request is larger than the whole GPU"
    if req is not None and req > PLAUSIBLE_BYTES:
        return ("; no device holds that much: a size computed wrong, usually in the wake of another failure "
                "(a collective that timed out), which is the one to look for")
    # The allocator asks the driver for a whole segment, not the request (2 MiB -> 20 MiB).
    segment = segment_bytes(req) if req is not None and d.backend in ("cuda", "hip") else None
    full = free is not None and total is not None and (
        free <= total * _FULL_FRACTION or (segment is not None and free < segment <= total * _FULL_FRACTION * 2))
    if full and not (others and others >= short):
        rounded = (f" (it had {fb(free)} free, less than the {fb(segment)} segment the allocator asks the driver "
                   f"for to serve {fb(req)})") if segment is not None and req is not None and free is not None \
            and req <= free < segment else ""
        if not d.fragmentation or (d.reserved_unallocated_bytes or 0) < (segment or 0):
            return f"; the card was full{rounded}"
        return (f"; the card was full{rounded}, and {fb(d.reserved_unallocated_bytes)} reserved by PyTorch but "
                "unallocated could not serve it: fragmentation")
    if req is not None and free is not None and free >= req and not others:
        return ("; the card had that much free, so something outside the allocator's view failed it "
                "(a driver or WSL limit, or another process taking the memory first)")
    if others and others >= short:
        n = len(d.other_processes)
        return f"; {'another process holds' if n == 1 else f'{n} other processes hold'} {fb(others)} on it, which is the real problem"
    if d.fragmentation:
        return (f"; {fb(d.reserved_unallocated_bytes)} was reserved by PyTorch but unallocated, so fragmentation, "
                "not the total, made it fail")
    if total is not None and free is not None and d.reserved_bytes is not None:
        outside = total - free - (d.this_process_bytes or d.reserved_bytes)
        if req and outside >= max(req, GIB // 2):
            return f"; {fb(outside)} is held outside this process's allocator (another process or a non-PyTorch library)"
    if d.allowed_bytes is not None and d.reserved_bytes is not None and d.reserved_bytes + (req or 0) > d.allowed_bytes:
        return f"; the process is capped at {fb(d.allowed_bytes)}"
    return ""


def _clip(text: str, n: int = 300) -> str:
    text = text.strip().rstrip(".")
    return text if len(text) <= n else text[: n - 1] + "…"
