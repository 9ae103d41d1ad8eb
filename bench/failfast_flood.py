"""How long a rank's GPU OOM takes to end the whole job, after a flood of output and without one.

    python bench/failfast_flood.py [--flood-mb 200] [--repeats 3] [--repo PATH]

The job (two processes, as torchrun's ranks would be) prints FLOOD MB of step lines from rank 0,
then rank 1 prints a real OOM message and both hang (the collective that would time out). gpudoc
ends the job `[run] oom_grace_s` (here 1 s) after it sees the OOM. Prints the median time from
the OOM line to gpudoc's exit, with no flood and after the flood, and the difference (target:
within 1 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRACE_S = 1.0

JOB = r'''
import os, sys, time
flood = int(sys.argv[1])
line = b"[rank0]: step 0000000 | loss 1.234567 | lr 3.0e-04 | grad_norm 0.8731 | tokens/s 123456\n"
if os.fork() == 0:
    # rank 1: waits for the flood, then runs out of memory and hangs in a collective
    time.sleep(0.5 + flood / 400e6)
    stamp = time.time()
    os.write(1, b"[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
                b"total capacity of 23.68 GiB of which 1.12 GiB is free. Of the allocated memory 21.90 GiB is "
                b"allocated by PyTorch, and 341.25 MiB is reserved by PyTorch but unallocated.\n")
    with open(sys.argv[2], "w") as out:
        out.write(repr(stamp))
    time.sleep(600)
    os._exit(0)
block = line * 10000
left = flood
while left > 0:
    os.write(1, block[:left])
    left -= len(block)
time.sleep(600)
'''


def once(repo: Path, flood_mb: int, work: Path) -> float:
    stamp_file = work / "oom-at"
    stamp_file.unlink(missing_ok=True)
    (work / "gpudoc.toml").write_text(f"[run]\noom_grace_s = {GRACE_S}\n")
    env = {**os.environ, "PYTHONPATH": str(repo), "NO_COLOR": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.Popen([sys.executable, "-m", "gpudoc", "run", "--no-check", "--", sys.executable, "-c", JOB,
                             str(flood_mb * 1024 * 1024), str(stamp_file)], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.wait(timeout=600)
    ended = time.time()
    return ended - float(stamp_file.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood-mb", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repo", default=str(REPO))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        quiet = statistics.median(once(Path(args.repo), 0, work) for _ in range(args.repeats))
        flooded = statistics.median(once(Path(args.repo), args.flood_mb, work) for _ in range(args.repeats))
    print(f"OOM line to the job's end, oom_grace_s = {GRACE_S:g}:")
    print(f"  no flood                {quiet:6.2f} s")
    print(f"  after {args.flood_mb} MB of output  {flooded:6.2f} s   delta {flooded - quiet:+.2f} s (target: within 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
