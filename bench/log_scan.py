"""How fast `gpudoc fix --log` reads a big log, and in how much memory, from one run.

    python bench/log_scan.py [--sizes-mb 1,10,100,1000] [--repeats 3]

Each log is training output (four ranks' step lines) with a real OOM message near its start (a
failure a flood of output pushed far out of the tail) and a torchrun failure summary at its end.
For each size, `python -m gpudoc fix --log FILE --json` runs in a fresh interpreter; the bench
prints the median wall time, MB/s net of the command's fixed cost (the same command on a
20-line log, measured in the same run), the child's peak RSS, and checks the answer is gpu_oom on
rank 1. Targets: at least 50 MB/s; RSS flat, whatever the size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_MB_S = 50.0
OOM = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
       "of 23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and "
       "341.25 MiB is reserved by PyTorch but unallocated.\n")
SUMMARY = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "train.py FAILED\nRoot Cause (first observed failure):\n[0]:\n  time      : 2026-01-01_00:00:00\n"
           "  host      : node1\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 4242)\n")

# Measured in the child itself: its own peak RSS, not the bench's.
CHILD = """
import resource, sys, time
from gpudoc.cli.main import run_cli
start = time.perf_counter()
status = run_cli(["gpudoc", "fix", "--log", sys.argv[1], "--json"])
elapsed = time.perf_counter() - start
sys.stderr.write(f"BENCH {elapsed} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n")
"""


def write_log(path: Path, size_mb: int) -> None:
    block = "".join(f"[rank{i % 4}]: step {i} loss {2.0 / (i + 1):.4f} lr 3e-04 it/s 7.1 tokens 4096\n"
                    for i in range(20000)).encode()
    target = size_mb * 1024 * 1024
    with open(path, "wb") as handle:
        handle.write(b"starting\n" + OOM.encode())
        written = 0
        while written < target:
            handle.write(block)
            written += len(block)
        handle.write(SUMMARY.encode())


def measure(path: Path, repo: Path, repeats: int) -> tuple[float, int, dict]:
    env = {**os.environ, "PYTHONPATH": str(repo), "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times, rss, answer = [], 0, {}
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, capture_output=True, text=True,
                              cwd=path.parent)
        line = next(ln for ln in done.stderr.splitlines() if ln.startswith("BENCH "))
        _, elapsed, peak_kib = line.split()
        times.append(float(elapsed))
        rss = max(rss, int(peak_kib))
        answer = json.loads(done.stdout)["diagnosis"]
    return statistics.median(times), rss, answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="1,10,100,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repo", default=str(REPO), help="the gpudoc checkout to measure (another commit: before)")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    slowest = None
    with tempfile.TemporaryDirectory() as work:
        tiny = Path(work) / "tiny.log"
        tiny.write_text("starting\n" + OOM + "step 1\n" * 18 + SUMMARY)
        fixed, fixed_rss, _ = measure(tiny, Path(args.repo), args.repeats)
        print(f"fixed cost (a 20-line log): {fixed:.3f} s, {fixed_rss / 1024:.0f} MiB")
        print(f"{'size':>8}  {'time':>8}  {'MB/s':>7}  {'peak RSS':>9}  answer")
        for size in (int(s) for s in args.sizes_mb.split(",")):
            path = Path(work) / f"train-{size}mb.log"
            write_log(path, size)
            real_mb = path.stat().st_size / 1e6
            elapsed, rss_kib, answer = measure(path, Path(args.repo), args.repeats)
            rate = real_mb / max(elapsed - fixed, 1e-6)
            slowest = rate if slowest is None else min(slowest, rate)
            ok = answer.get("cause") == "gpu_oom" and answer.get("rank") == 1
            print(f"{size:>6} MB  {elapsed:>6.2f} s  {rate:>7.1f}  {rss_kib / 1024:>6.0f} MiB  "
                  f"{answer.get('cause')} rank {answer.get('rank')}{'' if ok else '  (WRONG)'}")
            path.unlink()
    print(f"slowest: {slowest:.1f} MB/s (target: at least {TARGET_MB_S:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
