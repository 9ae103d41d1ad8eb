"""The helper's entry: one JSON spec per line on stdin, each answered by one line on stdout,
``MARKER`` then a JSON object; it ends when stdin does. gpudoc asks the same helper for each micro
batch an estimate needs, so torch and the model libraries are imported once. Anything else on stdout
(the project's code may print) is not an answer: the marker tells them apart.

Result: ``{"ok": true, "versions": {...}, "runs": [{"micro_batch_size", "first_step"?, "steady_state"}],
"notes": [...], "own_adapters": bool, "emulation": {...}, "load"?: {...}, "seconds": float}`` (``load``:
a 4-bit model's quantization at load, ``load.quantize_largest``) with each step
``{"peak_bytes", "stage", "breakdown", "start_bytes"}``; or ``{"ok": false, "reason": "...", "versions": {...}}``.
A reason is an answer, not a crash: the helper goes on to the next spec.
"""

from __future__ import annotations

import json
import platform
import sys
import time
import traceback
from typing import Any

PROTOCOL = 2
MARKER = "\x1egpudoc-simulation "  # the record separator first: no printed text starts so


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "helper": str(PROTOCOL)}
    for name in ("torch", "transformers", "peft"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = str(getattr(module, "__version__", "?"))
    return found


def simulate(spec: dict) -> dict:
    import torch

    from .build import autocast_dtype, build
    from .emulate import Emulation
    from .load import quantize_largest
    from .native_meta import use_native_meta_kernels
    from .step import Simulation
    from .tracker import LiveBytes

    torch.set_num_threads(1)  # meta tensors compute nothing; leave the cores to the job
    use_native_meta_kernels()
    job = build(spec)
    switches = spec.get("emulate") or {}
    emulation = Emulation(dropout=switches.get("dropout", True), attention=switches.get("attention", True),
                          grouped_mm=switches.get("grouped_mm", True),
                          autocast_dtype=autocast_dtype(spec) if switches.get("autocast", True) else None)
    tracker = LiveBytes()
    with tracker, emulation.installed():
        simulation = Simulation(spec, job, emulation, tracker)
        # The job's torchao where the profile names it (an estimate for another machine's stack).
        load = quantize_largest(job.model, tracker, torchao_version=spec.get("torchao") or _installed("torchao"))
        runs = simulation.run([int(b) for b in spec["micro_batch_sizes"]])
    notes = list(job.notes)
    if tracker.scalar_reads:
        notes.append(f"{tracker.scalar_reads} data-dependent read(s) (.item(), `if tensor:`) answered as for a "
                     "batch without padding")
    return {"runs": runs, "notes": notes, "optimizer_impl": simulation.impl,
            "trainable_bytes": simulation.trainable_bytes, "own_adapters": job.own_adapters,
            "emulation": {"sdpa_kernels": emulation.sdpa_kernels, "scalar_reads": tracker.scalar_reads},
            **({"load": load} if load else {})}


def _installed(name: str) -> str | None:
    """The installed release of ``name`` in this interpreter, without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _reason(exc: BaseException) -> str:
    """Why the simulation stopped, with the place in the model's code where it did."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    lowered = str(exc).lower()
    if "meta" in lowered and ("could not run" in lowered or "not implemented" in lowered or "no kernel" in lowered):
        return f"an op of the model has no meta implementation (a custom CUDA kernel?): {text}{where}"
    return f"the simulated step failed: {text}{where}"


def answer(request: str) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any]
    try:
        spec = json.loads(request)
        result = {"ok": True, **simulate(spec)}
    except Exception as exc:
        from .build import Unsupported

        reason = str(exc) if isinstance(exc, Unsupported) else _reason(exc)
        result = {"ok": False, "reason": reason}
    result["versions"] = versions()
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def main() -> int:
    out = sys.stdout
    while request := sys.stdin.readline():
        if request.strip():
            # On a line of its own, whatever the project's code printed last without ending its line.
            out.write("\n" + MARKER + json.dumps(answer(request)) + "\n")
            out.flush()
    return 0
