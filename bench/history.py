"""What a long run history costs the commands that read it, from one run.

    python bench/history.py [--sizes 10,1000,10000] [--repeats 5]

For each size, a GPUDOC_HOME with that many run records of one profile (each with a log, pids and
a diagnosis, as `gpudoc run` writes them) is made once; then `runs --last 5`, `logs`, `fix`,
`estimate` and `check` run in fresh interpreters against it. Prints the median wall time per
command and size, and the delta against the 10-record home measured in the same run (the target:
within 0.25 s at 10,000 records).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from check_speed import timed  # run from bench/: the same warm-up, then repeats

REPO = Path(__file__).resolve().parent.parent
TARGET_DELTA_S = 0.25
PROFILE = """[gpu]
memory_gib = 24
[train]
micro_batch_size = 8
gradient_accumulation_steps = 2
max_seq_len = 2048
precision = "bf16"
[model]
hidden = 2048
layers = 16
heads = 16
vocab = 32000
"""
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and "
       "341.25 MiB is reserved by PyTorch but unallocated.\n")


def make_home(root: Path, count: int, profile: Path) -> Path:
    runs = root / ".gpudoc" / "runs"
    runs.mkdir(parents=True)
    start = time.time() - count * 60
    for i in range(count):
        stamp = start + i * 60
        run_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(stamp)) + f"{i % 1000:03d}-{i:06x}"
        folder = runs / run_id
        folder.mkdir()
        failed = i % 3 == 0
        record = {
            "id": run_id, "command": ["torchrun", "--nproc_per_node=2", "train.py"], "cwd": str(root),
            "profile": {"name": "gpudoc.toml", "path": str(profile), "knobs": {"micro_batch_size": 8}},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(stamp)),
            "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(stamp + 30)),
            "duration_s": 30.0, "exit_code": 1 if failed else 0, "status": "failed" if failed else "ok",
            "cause": "gpu_oom" if failed else "ok",
            "diagnosis": {"cause": "gpu_oom" if failed else "ok", "summary": "out of memory" if failed else "ok"},
            "peak_memory_bytes": {"0": 20 * 2**30}, "gpus": [{"index": 0, "name": "A10G", "total_bytes": 24 * 2**30}],
            "host": os.uname().nodename, "launcher_pid": 4_000_000 + i, "process_group": 4_000_000 + i,
            "pids": [{"pid": 4_000_000 + i + k, "create_time": stamp + k} for k in range(3)], "user": "bench",
        }
        (folder / "run.json").write_text(json.dumps(record, indent=2))
        (folder / "output.log").write_text("step 1 loss 2.0\n" * 20 + (OOM if failed else ""))
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    py = sys.executable
    commands = [
        ("runs --last 5", ["runs", "--last", "5"]),
        ("logs", ["logs"]),
        ("fix", ["fix"]),
        ("estimate", ["estimate"]),
        ("check", ["check", "--only", "proc,env"]),
    ]
    results: dict[str, dict[int, float]] = {name: {} for name, _ in commands}
    with tempfile.TemporaryDirectory() as work:
        for size in sizes:
            root = Path(work) / f"home{size}"
            root.mkdir()
            (root / "gpudoc.toml").write_text(PROFILE)
            make_home(root, size, root / "gpudoc.toml")
            env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
            env.pop("GPUDOC_HOME", None)
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # measured as installed: bytecode compiled once
            env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
            for name, argv in commands:
                results[name][size] = statistics.median(timed([py, "-m", "gpudoc", *argv], env, root, args.repeats))
    base = sizes[0]
    print(f"{'command':<16}" + "".join(f"{s:>10,} rec" for s in sizes) + f"   delta {sizes[-1]:,} vs {base}")
    worst = 0.0
    for name, _ in commands:
        row = results[name]
        delta = row[sizes[-1]] - row[base]
        worst = max(worst, delta)
        print(f"{name:<16}" + "".join(f"{row[s]:>12.3f} s" for s in sizes) + f"   {delta:+.3f} s")
    print(f"worst delta: {worst:+.3f} s (target: within {TARGET_DELTA_S} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
