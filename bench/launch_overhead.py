#!/usr/bin/env python3
"""What `gpudoc run` adds to a launch: `gpudoc run --no-check -- python -c pass` vs `python -c pass`.

Prints the medians of N alternating runs and their difference (target: under 0.15 s).
usage: python bench/launch_overhead.py [N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compile_package() -> None:
    """Byte-compile gpudoc as `pip install` does: start-up must not include compiling sources."""
    import compileall

    compileall.compile_dir(str(REPO / "gpudoc"), quiet=1)
TARGET_S = 0.15


def timed(argv: list[str], env: dict, cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    compile_package()
    with tempfile.TemporaryDirectory(prefix="gpudoc-bench-") as work:
        env = {**os.environ, "PYTHONPATH": str(REPO), "GPUDOC_HOME": os.path.join(work, "home")}
        plain = [sys.executable, "-c", "pass"]
        wrapped = [sys.executable, "-m", "gpudoc", "run", "--no-check", "--", sys.executable, "-c", "pass"]
        for argv in (plain, wrapped):  # warm the page cache and __pycache__
            timed(argv, env, work)
        base, through = [], []
        for _ in range(n):
            base.append(timed(plain, env, work))
            through.append(timed(wrapped, env, work))
    b, g = statistics.median(base), statistics.median(through)
    added = g - b
    print(f"launch overhead ({n} runs each, medians)")
    print(f"  python -c pass                            {b:.3f} s")
    print(f"  gpudoc run --no-check -- python -c pass   {g:.3f} s")
    print(f"  added by gpudoc                           {added:.3f} s   "
          f"(target < {TARGET_S} s: {'met' if added < TARGET_S else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
