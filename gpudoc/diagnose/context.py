"""What the lines around a failure add to it: the message's own continuation lines (wrapped by
a terminal or a logger), figures that messages other than PyTorch's give
(TensorFlow's stream executor, its BFC allocator's dump), and a cause that only the traceback's
frames reveal (/dev/shm full, reported as a full disk)."""

from __future__ import annotations

import re

from gpudoc.diagnose.lines import Line

# TensorFlow's stream executor: "failed to allocate 10.40G (11170480128 bytes) from device".
_SE_ALLOC = re.compile(r"failed to alloc(?:ate)?\s+(?:\S+\s+)?\((\d+) bytes\)|failed to alloc(?:ate)?\s+(\d+) bytes")
_BFC_LIMIT = re.compile(r"memory_limit_:\s*(\d+)|^Limit:\s+(\d+)", re.MULTILINE)
_BFC_IN_USE = re.compile(r"^InUse:\s+(\d+)", re.MULTILINE)
# ENOSPC while multiprocessing makes its locks or queues: /dev/shm is full, whatever it says.
_SHM_FRAMES = re.compile(r"multiprocessing/(?:synchronize|queues|heap|shared_memory|reduction)\.py|SemLock"
                         r"|torch/multiprocessing|torch/utils/data/(?:dataloader|_utils)")


def figures_around(name: str, cause: str, vals: dict, lines: list[Line], i: int) -> dict:
    """Figures that lines other than PyTorch's allocator message give."""
    out: dict = {}
    if cause == "gpu_oom" and vals.get("requested_bytes") is None:
        sized = _SE_ALLOC.search(lines[i].text)
        if sized:
            out["requested_bytes"] = int(sized.group(1) or sized.group(2))
    if name == "tf_bfc_stats":
        block = "\n".join(line.text for line in lines[max(0, i - 20):i + 20])
        limit, in_use = _BFC_LIMIT.search(block), _BFC_IN_USE.search(block)
        total = int(limit.group(1) or limit.group(2)) if limit else None
        used = int(in_use.group(1)) if in_use else None
        out.update(total_bytes=total, allocated_bytes=used)
        if total is not None and used is not None:
            out["free_bytes"] = max(0, total - used)
    return out


def shm_in_disguise(lines: list[Line], i: int) -> bool:
    text = lines[i].text
    if "No space left on device" not in text and "Errno 28" not in text:
        return False
    return any(_SHM_FRAMES.search(line.text) for line in lines[max(0, i - 40):i])


def message_window(lines: list[Line], i: int, limit: int = 8) -> str:
    """The message starting at line ``i`` with its wrapped continuation lines.

    A message hard-wrapped at a fixed width (every line but the last exactly as long as the
    first) is joined without a space: the wrap may fall inside a number ("2.0" / "0 GiB").
    """
    first = lines[i]
    parts = [first.text]
    width = len(first.raw.rstrip("\r\n"))
    hard = width >= _HARD_WRAP_MIN
    previous = first
    for line in lines[i + 1:i + limit]:
        t = line.text
        if not t or not line.is_message or (first.rank is not None and line.rank not in (None, first.rank)):
            break
        if re.match(r"(?:Traceback|File \"|During handling|The above exception)", t):
            break
        if "Tried to allocate" in t and "Tried to allocate" in parts[0]:
            break  # the next OOM message; a header without it ("CUDA out of memory.") goes on here
        if hard and line.number == previous.number + 1 and len(previous.raw.rstrip("\r\n")) == width:
            # Cut at the width: this line goes on from there (with the space the cut fell on, if any).
            parts[-1] += (" " if previous.raw.endswith(" ") or line.raw[:1] in " \t" else "") + t
        else:
            parts.append(t)
        previous = line
        if re.search(r"Memory Management|environment-variables\)|reserved in total by PyTorch\)|cached\)", t):
            break
    return " ".join(parts)


_HARD_WRAP_MIN = 60  # shorter first lines are a message's own line breaks, not a terminal's width
