#!/usr/bin/env python3
"""A simulated estimate of a 7B Llama-style model at sequence 2048 (bf16, AdamW, micro batch 1):
the helper's wall time (target: under 15 s on a 2-core CPU machine) and its peak RSS.

usage: python bench/simulate_7b.py [PYTHON]   (default: this interpreter; it needs torch and transformers)
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpudoc.estimate.simulate import run_helper

TARGET_S = 15.0
LLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
            "max_position_embeddings": 4096}
SPEC = {"hf_config": LLAMA_7B, "arch": "decoder", "seq_len": 2048, "micro_batch_sizes": [1], "precision": "bf16-true",
        "optimizer": "adamw", "gradient_checkpointing": "none", "attention": "sdpa", "gradient_accumulation_steps": 1}


def main() -> int:
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = run_helper(SPEC, python=python, environ=dict(os.environ), cwd=Path(tmp), use_cache=False)
        wall = time.perf_counter() - started
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kilobytes on Linux
    run = result["runs"][0]
    gib = 1024**3
    print(f"7B Llama, seq 2048, bf16, AdamW (foreach), micro batch 1 — {result['versions']}")
    print(f"  first step peak   {run['first_step']['peak_bytes'] / gib:6.2f} GiB ({run['first_step']['stage']})")
    print(f"  steady state peak {run['steady_state']['peak_bytes'] / gib:6.2f} GiB ({run['steady_state']['stage']})")
    print(f"  wall {wall:.1f} s (helper's own {result['seconds']:.1f} s), target {TARGET_S:.0f} s; "
          f"helper peak RSS {rss_mib:.0f} MiB")
    return 0 if wall <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
