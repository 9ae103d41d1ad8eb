"""Failure signatures: one regex per message shape, with named groups for what it carries.

A line is matched against the shapes in order; the first that matches decides what the line is
evidence of. Order encodes specificity: a memory message beats the generic exception line that
carries it, an explicit NCCL error beats the vague "failed or timed out" line printed beside it.

``strength`` orders evidence when a log has several kinds:
3 — a memory failure named by the message itself (GPU OOM, host OOM killer, shared memory);
2 — an explicit failure (an exception, a CUDA/NCCL error, a collective timeout);
1 — circumstantial (a SIGKILL without the OOM killer's own line, "failed or timed out", SIGTERM).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudoc.diagnose.diagnosis import MEMORY_CAUSES
from gpudoc.units import parse_size

# A size as PyTorch, XLA, TF and friends print it: "2.26 GiB", "0 bytes", "607.00 KiB", "14.44GiB",
# "375.40 MB", "20.0G".
SIZE = r"\d+(?:\.\d+)?\s?(?:[KMGTPE]i?B|[KMGTPE]\b|bytes?\b|B\b)"

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "int32": 4, "uint32": 4, "double": 8, "float64": 8, "int64": 8,
    "uint64": 8, "half": 2, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2, "int8": 1,
    "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
}


@dataclass(frozen=True)
class Signature:
    name: str
    cause: str
    strength: int
    pattern: re.Pattern
    backend: str | None = None
    inferred: bool = False  # the message does not say "memory"; the cause is the usual reason
    # The message reports that another rank went away (its connection closed mid-collective):
    # what every surviving rank prints when one rank dies, so never the cause while the log
    # shows a rank dying.
    peer: bool = False


@dataclass
class Match:
    signature: Signature
    match: re.Match
    cause: str
    backend: str | None
    strength: int
    inferred: bool
    fields: dict = field(default_factory=dict)

    @property
    def peer(self) -> bool:
        return self.signature.peer


def _sig(name: str, cause: str, strength: int, pattern: str, backend: str | None = None, inferred: bool = False,
         flags: int = 0, peer: bool = False) -> Signature:
    return Signature(name, cause, strength, re.compile(pattern, flags), backend, inferred, peer)


_I = re.IGNORECASE

# Lines that only report a consequence of a failure elsewhere (torchrun tearing the job down,
# a subprocess wrapper). They never decide the cause themselves.
CONSEQUENCE = re.compile(
    r"Sending process \d+ closing signal"
    r"|ChildFailedError"
    r"|CalledProcessError: Command .* returned non-zero exit status 1\b"
    r"|The caller indicates that this is not a failure"
)

# Warnings are not failures: a training loop that logs "WARNING: ran out of memory, skipping
# batch" and carries on did not die of it.
WARNING = re.compile(r"\bWARNING\b|\b[A-Z]\w*Warning\b|\bwarnings\.warn\b|\bwarn\(")

SIGNATURES: tuple[Signature, ...] = (
    # ---- GPU memory -------------------------------------------------------------------------
    _sig("mps", "gpu_oom", 3,
         rf"MPS backend out of memory(?:\s*\(MPS allocated:\s*(?P<mps_alloc>{SIZE}),\s*"
         rf"other allocations:\s*(?P<mps_other>{SIZE}),\s*max allowed:\s*(?P<mps_max>{SIZE})\))?"
         rf"(?:\.\s*Tried to allocate\s+(?P<req>{SIZE}))?", "mps"),
    # PyTorch's caching allocator, every generation ("Tried to allocate" is the anchor; the
    # figures are read from the whole message, which terminals and loggers wrap).
    _sig("torch_alloc", "gpu_oom", 3,
         rf"(?:(?P<dev>\b[A-Za-z]+) out of memory\.?\s*)?Tried to allocate\s+(?:more than\s+)?(?P<req>{SIZE})"
         r"(?!\s*on private pool)"),
    _sig("tf_oom", "gpu_oom", 3,
         r"OOM when allocating tensor(?: with shape\s*\[?(?P<shape>[\d,\s]*)\]?)?"
         r"(?: and type (?P<dtype>\w+))?(?: on (?P<device>\S+?))?(?: by allocator (?P<allocator>\w+))?"
         r"(?=[\s.,\]]|$)", "tensorflow"),
    _sig("tf_bfc", "gpu_oom", 3,
         rf"Allocator \((?P<allocator>\w+)\) ran out of memory trying to allocate\s*(?P<req>{SIZE})",
         "tensorflow"),
    _sig("xla_oom", "gpu_oom", 3,
         rf"(?:RESOURCE_EXHAUSTED|Resource exhausted)?:?\s*Out of memory (?:while )?trying to allocate\s+"
         rf"(?P<req>{SIZE}|\d+)", "xla", flags=_I),
    _sig("xla_hbm", "gpu_oom", 3,
         rf"Ran out of memory in memory space (?:hbm|vmem)\.?(?:\s*Used\s+(?P<used>{SIZE}) of\s+"
         rf"(?P<total>{SIZE}))?", "xla", flags=_I),
    _sig("xla_bfc", "gpu_oom", 3,
         rf"RESOURCE_EXHAUSTED:.*?(?:Failed to allocate request for\s+(?P<req>{SIZE})|out of memory)",
         "xla", flags=_I),
    _sig("theano", "gpu_oom", 3,
         r"Error allocating (?P<req>\d+) bytes of device memory \(out of memory\)"
         r"(?:\.\s*Driver report (?P<free>\d+) bytes free and (?P<total>\d+) bytes total)?", "cuda"),
    # TensorFlow's and XLA's stream executor on ROCm name the HIP status as the driver spells it
    # ("HIP_ERROR_OutOfMemory", the older "hipError_t(1002)"), with the size it asked for.
    _sig("hip_error", "gpu_oom", 3,
         rf"(?:failed to allocate\s+{SIZE}\s*\((?P<req_bytes>\d+) bytes\) from device:\s*)?"
         r"(?:\bhipErrorOutOfMemory\b|\bHIP_ERROR_OUT_?OF_?MEMORY\b|\bhipError_t\(1002\)|\bhsa_status_error_out_of_resources\b)"
         r"|\bHIP error:?\s*out of memory|\bHIP out of memory", "hip", flags=_I),
    # TensorFlow's BFC allocator dumps its state when it runs out; the headline OOM line may be
    # missing from what was kept (a cut log), the statistics are enough.
    _sig("tf_bfc_stats", "gpu_oom", 3,
         rf"Sum Total of in-use chunks:\s*(?P<inuse>{SIZE})"
         r"|\bmemory_limit_:\s*(?P<limit>\d+)\s+available bytes:\s*(?P<avail>\d+)", "tensorflow"),
    # The same dump cut further: only its listing of chunks and bins is left. The allocator prints
    # it when an allocation failed, never otherwise.
    _sig("tf_bfc_listing", "gpu_oom", 3,
         r"bfc_allocator\.cc:\d+\]\s*(?:(?:Chunk|Free|InUse)\s+at (?:0x)?[0-9a-fA-F]+ (?:of size|next)\b"
         r"|Bin \(\d+\):\s*Total Chunks:|Summary of in-use Chunks by size|\d+ Chunks of size \d+ totalling)",
         "tensorflow"),
    _sig("cuda_lib_alloc", "gpu_oom", 3,
         r"\b(?:CUBLAS|CUDNN|CUSOLVER|CUSPARSE)_STATUS_ALLOC_FAILED\b|\bCUFFT_ALLOC_FAILED\b"
         r"|\bCURAND_STATUS_ALLOCATION_FAILED\b|\bcuDNN error:.*\bout of memory", "cuda"),
    _sig("cuda_error_oom", "gpu_oom", 3,
         r"\bcudaErrorMemoryAllocation\b|\bCUDA_ERROR_OUT_OF_MEMORY\b"
         r"|\bcuda\w*[^\n]{0,60}?\bout of memory\b|\berror=2 : out of memory"
         r"|\bCuda failure (?:2\b|'out of memory')", "cuda", flags=_I),
    _sig("oom_class", "gpu_oom", 3,
         r"\btorch\.(?:cuda\.)?OutOfMemoryError\b|(?<![\w.])OutOfMemoryError:", "cuda"),
    # cuBLAS/cuDNN fail to create their handle when the GPU has no room left for their
    # workspace; the message names initialisation, the usual cause is memory.
    _sig("cuda_lib_init", "gpu_oom", 3,
         r"\b(?:CUDNN|CUBLAS)_STATUS_NOT_INITIALIZED\b", "cuda", inferred=True),
    # ---- host memory, shared memory -------------------------------------------------------
    _sig("dataloader_signal", "host_oom", 3,
         r"DataLoader worker \(pids?\(?s?\)?\s*(?P<pid>[\d, ]+)\)? is killed by signal:\s*(?P<sig>[\w ]+)"),
    _sig("shm_bus", "shm", 3,
         r"\bbus error\b|insufficient shared memory|out of shared memory|raise your shared memory limit"
         r"|shared memory segment|/dev/shm\b.*(?:No space left|Cannot allocate|fallocate|too small)"
         r"|(?:No space left on device|fallocate failed).*?/dev/shm"
         r"|unable to (?:write to|open|mmap|create|allocate)[^<\n]*<?/torch_\d", flags=_I),
    _sig("kernel_oom", "host_oom", 3,
         r"Out of memory:\s*Kill(?:ed)? process\s*(?P<pid>\d+)?\s*(?:\((?P<comm>[^)]*)\))?"
         r"|\binvoked oom-killer\b|\boom-kill:|Memory cgroup out of memory|oom_reaper: reaped process"
         r"|\boom[-_]kill events?\b|cgroup out-of-memory handler|\bOOMKilled\b", flags=_I),
    _sig("cpu_alloc", "host_oom", 3,
         r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
         r"(?::\s*you tried to allocate (?P<req>\d+) bytes)?"),
    _sig("bad_alloc", "host_oom", 3, r"std::bad_alloc|(?<![\w.])MemoryError\b|\[Errno 12\] Cannot allocate memory"),
    # ---- collectives ----------------------------------------------------------------------
    # A peer's connection dropping under a collective (gloo's pair.cc, NCCL's transports, the
    # TCPStore): before the watchdog and NCCL-error shapes, which wrap the same text.
    _sig("peer_lost", "error", 2,
         r"Connection (?:closed|reset) by (?:remote )?peer"
         r"|remote process exited or there was a network error|remote process exiting prematurely"
         r"|\bncclRemoteError\b|\bgloo::(?:IoException|EnforceNotMet)\b"
         r"|gloo/transport/\S+\] (?:Read|Write) error|failed to recv, got 0 bytes"
         r"|(?:DistNetworkError|gloo)\b.*\bBroken pipe\b", peer=True),
    _sig("nccl_watchdog", "nccl_timeout", 2,
         r"Watchdog caught collective operation timeout(?::\s*WorkNCCL\((?P<work>(?:[^()]|\([^)]*\))*)\))?"
         r"(?:\s*ran for (?P<ran_ms>\d+) milliseconds)?"
         r"|Timeout at NCCL work|watchdog (?:got stuck|thread stuck) for \d+ seconds"
         # PyTorch >= 2.2's heartbeat monitor: the watchdog itself hung (no "collective timeout" in it)
         r"|Heartbeat monitor timed out|detected no heartbeat of its watchdog"
         r"|\bNCCL (?:timeout|operation timed out)\b|Timed out waiting \d+ms for (?:send|recv) operation"),
    _sig("nccl_error", "error", 2,
         r"\bnccl(?:Remote|System|Internal|InvalidUsage|InvalidArgument|UnhandledCuda)Error\b"
         r"|\bNCCL error\b|NCCL watchdog thread terminated with exception:\s*(?P<msg>.*)"
         r"|\bNCCL communicator was aborted\b"),
    _sig("nccl_vague", "nccl_timeout", 1,
         r"failure detected by watchdog|Exception \(either an error or timeout\) detected by watchdog"
         r"|Some NCCL operations have failed or timed out"
         # PyTorch >= 2.4's fatal (glog "F") line as the watchdog's monitor takes the process down.
         r"|Terminating the process after attempting to dump debug info"),
    # ---- signals and exit codes -----------------------------------------------------------
    _sig("sigkill", "host_oom", 1,
         r"exit\s?code\s*:?\s*-9\b|Signal 9 \(SIGKILL\)|got signal:?\s*9\b|Signals\.SIGKILL"
         r"|exit (?:status|code) 137\b|^Killed\b|^zsh: killed\b|\bline \d+:\s*\d+ Killed\b"
         r"|killed by signal 9\b", flags=_I),
    _sig("sigbus", "shm", 1, r"exit\s?code\s*:?\s*-7\b|Signal 7 \(SIGBUS\)|\bSIGBUS\b", flags=_I),
    _sig("sigterm", "signal", 1,
         r"exit\s?code\s*:?\s*-(?P<neg>15|1|2)\b|Signal (?P<num>15|1|2) \(SIG(?:TERM|HUP|INT)\)"
         r"|got signal:?\s*(?P<got>15|1|2)\b|Signals\.SIG(?P<name>TERM|HUP|INT)\b"
         r"|Received SIG(?P<recv>TERM|HUP|INT)\b|CANCELLED AT \S+(?:.*?DUE TO (?P<due>[A-Z ]+))?"
         r"|\bKeyboardInterrupt\b|^Terminated\b"),
    # ---- everything else ------------------------------------------------------------------
    # A CUDA kernel's assert(): the index it checked, the kernel, the file; the RuntimeError
    # ("device-side assert triggered") that follows it may be missing from the log.
    # argparse refusing the command line (exit status 2): "usage: ..." then "prog: error: ...".
    _sig("argparse", "error", 2,
         r"^(?P<prog>[\w.\-/]+\.py|[\w\-]+): error: (?P<msg>(?:unrecognized arguments|argument |the following "
         r"arguments are required|ambiguous option|invalid choice|expected one argument).*)"),
    _sig("device_assert", "error", 2,
         r"(?P<file>[\w./-]+\.(?:cu|cuh|h|cpp)):(?P<line>\d+): (?P<kernel>[^:\n]+): block: \[[\d, ]+\],"
         r" thread: \[[\d, ]+\] Assertion [`']?(?P<expr>.*?)[`']? failed"),  # quotes: markdown may have eaten them
    _sig("cuda_error", "error", 2, r"\bCUDA error:\s*(?P<msg>.+)|cuda runtime error \(\d+\) : (?P<msg2>.+)"),
    _sig("cpp_terminate", "error", 2, r"terminate called after throwing an instance of '(?P<what>[^']+)'"),
    _sig("crash", "error", 2,
         r"\bSegmentation fault\b|\bIllegal instruction\b|\bFloating point exception\b"),
    # An abort is how NCCL's watchdog takes a process down, so on its own it says little.
    _sig("abort", "error", 1,
         r"exit\s?code\s*:?\s*-(?:11|6|4|8)\b|Signal (?:11|6|4|8) \(SIG(?:SEGV|ABRT|ILL|FPE)\)"),
    _sig("exception", "error", 2,
         r"(?:^|(?<=[\s:>|(\]]))(?P<exc>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Failure|Exit)|Exception|Error)"
         r"|(?:[a-z_]\w*\.)+[A-Z][a-z]\w*(?=:\s))"  # a qualified class: triton.….OutOfResources: …
         r"(?::\s*(?P<msg>\S.*)|\s*$)"),
)

# Checked before the line-by-line signatures: launcher wrappers whose own exception line is noise.
_LAUNCHER_EXC = re.compile(
    r"^(?:torch\.distributed\.elastic\.[\w.]*|subprocess\.)?(?:ChildFailedError|CalledProcessError|SignalException)$"
)

# One regex that is true for every line any signature could match; lines without it skip the
# signature loop entirely (the common case in a long training log).
PREFILTER = re.compile(
    r"out of memory|Tried to allocate|OutOfMemory|OOM|oom|RESOURCE_EXHAUSTED|Resource exhausted"
    r"|_ALLOC_FAILED|ALLOCATION_FAILED|NOT_INITIALIZED|MemoryAllocation|OutOfMemory|bad_alloc|MemoryError"
    r"|Cannot allocate|can't allocate|not enough memory|killed|Killed|bus error|Bus error|BUS ERROR|SIGBUS"
    r"|shared memory|/dev/shm|/torch_|[Ww]atchdog|[Tt]imeout|[Tt]imed out|nccl|NCCL"
    r"|exit\s?code|[Ss]ignal|SIG[A-Z]|CANCELLED|KeyboardInterrupt|Terminated|exit (?:status|code)"
    r"|Error|Exception|Failure|Exit\b|CUDA error|cuda runtime error|terminate called"
    r"|Segmentation fault|Illegal instruction|Floating point exception|out of resource"
    r"|by (?:remote )?peer|remote process|gloo|failed to recv|Assertion|in-use chunks|memory_limit_"
    r"|bfc_allocator|hipError_t|Terminating the process",
    _I,
)

# The cheaper subset the live stream scanner looks for: failures worth ending a job over.
STREAM_CAUSES = frozenset({"gpu_oom", "host_oom", "shm", "nccl_timeout"})


def match_line(text: str) -> Match | None:
    """The first signature that matches one normalised line, with its extracted fields."""
    if not text or not PREFILTER.search(text):
        return None
    # A consequence phrase is no evidence; but where a log lost its line breaks, a memory failure
    # may sit on the same line beside it, and that still counts.
    consequence = CONSEQUENCE.search(text) is not None
    # Triton's "out of resource: shared memory" is a kernel's on-chip limit, not /dev/shm and not
    # device memory: a plain error.
    triton = "OutOfResources" in text or "out of resource: shared memory" in text
    for sig in SIGNATURES:
        if triton and sig.cause in ("shm", "gpu_oom"):
            continue
        if consequence and (sig.strength < 3 or sig.cause not in MEMORY_CAUSES):
            continue
        m = sig.pattern.search(text)
        if not m:
            continue
        if sig.name == "exception":
            exc = m.group("exc")
            if _LAUNCHER_EXC.match(exc):
                continue
            if exc in ("Error", "Exception") and not m.group("msg"):
                continue
        if sig.name == "torch_alloc" and not _is_torch_alloc(text, m):
            continue
        found = _refine(sig, m, text)
        if implausible(found):
            # "more than 1EB" beside the failure that caused it, on one line (a title, a joined log).
            return next((other for later in SIGNATURES[SIGNATURES.index(sig) + 1:]
                         if later.cause not in MEMORY_CAUSES and later.name != "exception"
                         and (other := _plain(later, text)) is not None), found)
        return found
    return None


# A pebibyte: beyond any GPU that exists. A request this size is a size gone wrong in the wake of
# another failure (a collective that timed out, a corrupted tensor), not memory running out.
PLAUSIBLE_BYTES = 2**50


def implausible(m: Match) -> bool:
    if m.cause != "gpu_oom":
        return False
    req = m.match.groupdict().get("req")
    size = parse_size(req) if req else None
    return size is not None and size > PLAUSIBLE_BYTES


def _plain(sig: Signature, text: str) -> Match | None:
    m = sig.pattern.search(text)
    return _refine(sig, m, text) if m else None


def _is_torch_alloc(text: str, m: re.Match) -> bool:
    # "Tried to allocate" alone is common English; require the allocator's own context.
    return bool(
        m.group("dev") or "out of memory" in text.lower() or re.search(r"\(GPU \d*;|total capac", text)
    )


def _refine(sig: Signature, m: re.Match, text: str) -> Match:
    cause, backend, strength = sig.cause, sig.backend, sig.strength
    fields: dict = {}
    name = sig.name
    if name == "torch_alloc":
        dev = (m.group("dev") or "CUDA").upper()
        backend = {"CUDA": "cuda", "HIP": "hip", "MPS": "mps"}.get(dev)
        if dev not in ("CUDA", "HIP", "MPS", "XPU", "NPU", "MTIA", "MEMORY"):
            backend = "cuda"
    elif name == "tf_oom":
        device = m.group("device") or ""
        if re.search(r"(?:device:)?CPU:\d+|/cpu:\d+", device, _I) or (m.group("allocator") or "").lower() == "cpu":
            cause = "host_oom"
        gpu = re.search(r"(?:device:)?GPU:(\d+)", device, _I)
        if gpu:
            fields["gpu_index"] = int(gpu.group(1))
        shape, dtype = m.group("shape"), (m.group("dtype") or "").lower()
        if shape and dtype in _DTYPE_BYTES:
            n = 1
            for dim in re.findall(r"\d+", shape):
                n *= int(dim)
            fields["requested_estimate_bytes"] = n * _DTYPE_BYTES[dtype]
    elif name == "tf_bfc":
        alloc = m.group("allocator")
        gpu = re.match(r"GPU_(\d+)", alloc)
        if gpu:
            fields["gpu_index"] = int(gpu.group(1))
        elif alloc.lower().startswith("cpu"):
            cause = "host_oom"
    elif name == "dataloader_signal":
        signame = m.group("sig").strip().lower()
        if "bus" in signame:
            cause = "shm"
        elif "kill" in signame:
            cause = "host_oom"
        elif "segmentation" in signame or "abort" in signame:
            cause, strength = "error", 2
        else:
            cause, strength = "signal", 1
        pids = re.findall(r"\d+", m.group("pid"))
        if pids:  # "(pid(s) , )": the figures can be lost (a wrapped or pasted log)
            fields["pid"] = int(pids[0])
    elif name == "kernel_oom":
        pid = m.groupdict().get("pid") or next(iter(re.findall(r"\bpid=(\d+)", text)), None)
        if pid:
            fields["pid"] = int(pid)
        comm = m.groupdict().get("comm") or next(iter(re.findall(r"\btask=([\w.-]+)", text)), None)
        if comm:
            fields["comm"] = comm
    elif name == "nccl_error":
        inner = m.groupdict().get("msg")
        if inner and re.search(r"timeout|timed out", inner, _I):
            cause = "nccl_timeout"
    elif name == "cuda_error":
        msg = (m.group("msg") or m.group("msg2") or "")
        if re.search(r"out of memory", msg, _I):
            cause, strength = "gpu_oom", 3
    elif name == "cpp_terminate" and m.group("what") == "std::bad_alloc":
        cause, strength = "host_oom", 3
    elif name == "exception":
        exc = m.group("exc").rsplit(".", 1)[-1]
        if exc == "MemoryError":
            cause, strength = "host_oom", 3
        elif exc in ("SystemExit",) and not m.group("msg"):
            strength = 1
    return Match(sig, m, cause, backend, strength, sig.inferred, fields)
