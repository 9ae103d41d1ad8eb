#!/usr/bin/env python3
"""What the probe costs a job: a CPU training loop of STEPS optimizer steps, timed inside the job, with
the probe's directory on its PYTHONPATH (as `gpudoc run` puts it) and without; and the start-up of a
Python that never imports torch, with and without (the probe must cost it nothing measurable).

Alternating runs, medians; prints the ratio of each against its baseline from the same run.
Target: <= 1% of step time; the start-up difference within the noise of `python -c pass` (the probe
loads at the job's first import of argparse, a config parser or torch; `import argparse` shows that cost).
usage: python bench/probe_overhead.py [ROUNDS] [STEPS]
       python bench/probe_overhead.py --start-up [ROUNDS]   (the start-ups alone, no torch)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SITE = REPO / "gpudoc" / "probe" / "site"
TARGET = 0.01

LOOP = r"""
import json, statistics, sys, time
import torch
from torch import nn
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(1000, 128), nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 1000))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(torch.randint(1000, (16384, 64)), batch_size=8)
times, it = [], iter(data)
for step in range(int(sys.argv[1])):
    start = time.perf_counter()
    for _ in range(2):  # two micro batches a step
        x = next(it)
        model(x).logsumexp(-1).mean().backward()
    opt.step(); opt.zero_grad()
    times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times[10:])))
"""


def loop(steps: int, probed: bool, work: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUDOC_PROBE_DIR")}
    if probed:
        env.update(PYTHONPATH=str(SITE), GPUDOC_PROBE_DIR=os.path.join(work, "probe"))
    out = subprocess.run([sys.executable, "-c", LOOP, str(steps)], env=env, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout))


def _env(probed: bool, work: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUDOC_PROBE_DIR")}
    if probed:
        env.update(PYTHONPATH=str(SITE), GPUDOC_PROBE_DIR=os.path.join(work, "probe"))
    return env


def launch(env: dict[str, str], code: str = "pass") -> tuple[float, float]:
    """One `python -c CODE`: its wall time and its CPU time (user + system, from the kernel: what a
    busy machine's other work does not inflate)."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"python -c {code!r} exited {child.returncode}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def start_up(probed: bool, work: str, n: int = 15) -> float:
    return statistics.median(launch(_env(probed, work))[0] for _ in range(n))


def start_ups(rounds: int) -> int:
    """The start-up of a Python that never imports torch, launches alternating one by one without and
    with the probe (so a busy machine's drift falls on both), ROUNDS x 15 of each: `python -c pass`,
    then one that imports argparse (the probe loads). Wall and CPU time, medians."""
    with tempfile.TemporaryDirectory(prefix="gpudoc-probe-bench-") as work:
        for code in ("pass", "import argparse"):
            plain, probed = [], []
            for _ in range(rounds * 15):
                plain.append(launch(_env(False, work), code))
                probed.append(launch(_env(True, work), code))
            print(f"start-up of `python -c {code!r}`, {len(plain)} alternating launches each, medians:")
            for what, index in (("wall", 0), ("CPU", 1)):
                a, b = statistics.median(t[index] for t in plain), statistics.median(t[index] for t in probed)
                print(f"  {what:4} {a * 1e3:7.2f} ms without the probe, {b * 1e3:7.2f} ms with ({(b - a) * 1e3:+.2f} ms)"
                      f"   ratio {b / a:.4f}")
    return 0


def compile_probe() -> None:
    """Byte-compile the agent as `pip install` does: start-up must not include compiling it."""
    import compileall

    compileall.compile_dir(str(SITE.parent), quiet=1, force=True)


def main() -> int:
    compile_probe()
    if sys.argv[1:2] == ["--start-up"]:
        return start_ups(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    with tempfile.TemporaryDirectory(prefix="gpudoc-probe-bench-") as work:
        bare, probed = [], []
        for _ in range(rounds):  # alternating, so drift falls on both
            bare.append(loop(steps, False, work))
            probed.append(loop(steps, True, work))
        plain_start, probed_start = start_up(False, work), start_up(True, work)
        written = sorted(p.name for p in Path(work, "probe").glob("*")) if Path(work, "probe").exists() else []
    b, p = statistics.median(bare), statistics.median(probed)
    print(f"probe overhead: CPU loop of {steps} steps, {rounds} alternating rounds, median step time")
    print(f"  without the probe   {b * 1e3:8.3f} ms")
    print(f"  with the probe      {p * 1e3:8.3f} ms   ratio {p / b:.4f}   "
          f"(target <= {1 + TARGET:.2f}: {'met' if p / b <= 1 + TARGET else 'NOT met'})")
    print(f"  rounds without      {', '.join(f'{x * 1e3:.3f}' for x in bare)}")
    print(f"  rounds with         {', '.join(f'{x * 1e3:.3f}' for x in probed)}")
    print(f"start-up of `python -c pass` (no torch): {plain_start * 1e3:.1f} ms without, {probed_start * 1e3:.1f} ms "
          f"with ({(probed_start - plain_start) * 1e3:+.1f} ms); files written: {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
