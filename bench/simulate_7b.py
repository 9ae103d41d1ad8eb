#!/usr/bin/env python3
"""A simulated estimate of a 7B Llama-style model at sequence 2048 (bf16, AdamW, micro batch 1), the
way a user asks for it: ``gpudoc estimate --simulate --json`` on a profile with the model's
config.json, with a 141 GiB card to search the largest micro batch against (the search adds at most
one simulation to the estimate's own helper run) and without one. Prints wall and CPU seconds (the
estimate's process and the helper's together: on a loaded machine the wall time stretches, the CPU
time hardly does), the load average at the start, and the helper's peak RSS.
Target: 15 s of wall time on an idle 2-core machine, 400 MiB of helper RSS.

usage: python bench/simulate_7b.py [PYTHON]   (default: this interpreter; it needs torch and transformers)
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S, TARGET_RSS_MIB = 15.0, 400
LLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
            "max_position_embeddings": 4096}
PROFILE = """[train]
micro_batch_size = 1
max_seq_len = 2048
precision = "bf16-true"
optimizer = "adamw"
gradient_checkpointing = false
[model]
hf_config = "config.json"
"""


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def estimate(python: str, gpu_gib: float | None) -> tuple[dict, float, float]:
    gpudoc = Path(sys.executable).with_name("gpudoc")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "gpudoc.toml").write_text(PROFILE)
        Path(tmp, "config.json").write_text(json.dumps(LLAMA_7B))
        environ = {**os.environ, "XDG_CACHE_HOME": f"{tmp}/cache", "HOME": tmp}  # nothing cached
        args = [str(gpudoc), "estimate", "--simulate", "--json", "--python", python]
        if gpu_gib:
            args += ["--gpu-memory", str(gpu_gib)]
        cpu, started = _cpu_children(), time.perf_counter()
        done = subprocess.run(args, cwd=tmp, env=environ, capture_output=True, text=True, check=False)
        wall, cpu = time.perf_counter() - started, _cpu_children() - cpu
    if done.returncode not in (0, 1):
        sys.exit(f"gpudoc estimate failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout), wall, cpu


def main() -> int:
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    gib = 1024**3
    ok = True
    for gpu in (None, 141.0):
        load = os.getloadavg()[0]
        doc, wall, cpu = estimate(python, gpu)
        if doc["source"] != "simulation":
            sys.exit(f"the formula answered: {doc['notes']}")
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kilobytes on Linux
        search = f", largest micro batch {doc['max_micro_batch_size']} on {gpu:.0f} GiB" if gpu else ""
        print(f"7B Llama, seq 2048, bf16, AdamW, micro batch 1{search}: peak {doc['peak_bytes'] / gib:.2f} GiB; "
              f"wall {wall:.1f} s, CPU {cpu:.1f} s (load average {load:.1f} at the start), helper peak RSS "
              f"{rss:.0f} MiB")
        ok = ok and cpu <= TARGET_S and rss <= TARGET_RSS_MIB
    print(f"targets: {TARGET_S:.0f} s wall on an idle 2-core machine (the CPU time is its floor), "
          f"{TARGET_RSS_MIB} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
