"""How long `gpudoc check` and `gpudoc --help` take next to importing torch, from one run.

    python bench/check_speed.py [--repeats 9]

Prints the median wall time of `python -m gpudoc check`, `python -m gpudoc --help`,
`python -c "import torch"` and `python -m torch.utils.collect_env`, and the ratios. Targets: check
and --help under 0.10 s, check under a quarter of the torch import. Then `check --snapshot` of a
machine whose GPUs hold 0 to 10,000 processes: the cost per process must not grow with their number. Every command runs once first so each is measured warm (bytecode
compiled, files in the page cache), the way a user's second run is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 0.10
TARGET_RATIO = 0.25
# A real capture: two GPUs, each with one process holding memory.
SNAPSHOT = REPO / "tests" / "fixtures" / "real" / "nvidia-smi" / \
    "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"
PROCESS_COUNTS = (0, 1000, 3000, 10000)


def timed(argv: list[str], env: dict, cwd: str | Path, repeats: int) -> list[float]:
    """Wall times of ``repeats`` runs of ``argv``, after one unmeasured warm-up run."""
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def with_processes(facts: dict, count: int) -> dict:
    """``facts`` (a check's JSON) with ``count`` processes spread over its GPUs, each known to /proc."""
    facts = json.loads(json.dumps(facts))
    gpus = facts["gpus"]
    facts["processes"] = []
    for gpu in gpus:
        template = gpu["processes"][0]
        gpu["processes"] = [dict(template, pid=100_000 + gpu["index"] * 1_000_000 + i, used_memory_bytes=1 << 24)
                            for i in range(count // len(gpus))]
        facts["processes"] += [{"pid": p["pid"], "visible": True, "name": "python", "user": "someone", "uid": 4242}
                               for p in gpu["processes"]]
    return facts


def process_scaling(env: dict, work: str, repeats: int) -> None:
    py = sys.executable
    done = subprocess.run([py, "-m", "gpudoc", "check", "--snapshot", str(SNAPSHOT), "--json"], env=env, cwd=work,
                          capture_output=True, text=True)
    facts = json.loads(done.stdout)["facts"]
    print("\ngpudoc check --snapshot, GPU processes:")
    previous = None
    for count in PROCESS_COUNTS:
        path = os.path.join(work, f"facts-{count}.json")
        with open(path, "w") as handle:
            json.dump({"facts": with_processes(facts, count)}, handle)
        median = statistics.median(timed([py, "-m", "gpudoc", "check", "--snapshot", path], env, work, repeats))
        per = f"  {(median - previous[1]) / (count - previous[0]) * 1e6:5.0f} us per process added" if previous else ""
        print(f"  {count:6d} processes  median {median:7.3f} s{per}")
        previous = (count, median)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "GPUDOC_HOME": os.path.join(work, ".gpudoc")}
        # An installed package has compiled bytecode; keep it in a private cache so the checkout stays clean.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
        py = sys.executable
        rows = [
            ("gpudoc check", [py, "-m", "gpudoc", "check"]),
            ("gpudoc --help", [py, "-m", "gpudoc", "--help"]),
            ("python -c 'import torch'", [py, "-c", "import torch"]),
            ("python -m torch.utils.collect_env", [py, "-m", "torch.utils.collect_env"]),
        ]
        medians = {}
        for label, argv in rows:
            repeats = args.repeats if label.startswith("gpudoc") else max(3, args.repeats // 3)
            samples = timed(argv, env, work, repeats)
            medians[label] = statistics.median(samples)
            print(f"{label:<36} median {medians[label]:7.3f} s  (min {min(samples):.3f}, max {max(samples):.3f}, n={repeats})")
        process_scaling(env, work, max(3, args.repeats // 3))
    check, help_ = medians["gpudoc check"], medians["gpudoc --help"]
    torch_import = medians["python -c 'import torch'"]
    collect = medians["python -m torch.utils.collect_env"]
    print()
    print(f"gpudoc check / import torch    = {check / torch_import:.3f}  (target < {TARGET_RATIO})")
    print(f"gpudoc check / collect_env     = {check / collect:.3f}")
    print(f"gpudoc check under {TARGET_S} s: {'yes' if check < TARGET_S else 'NO'}; "
          f"under a quarter of import torch: {'yes' if check < TARGET_RATIO * torch_import else 'NO'}; "
          f"gpudoc --help under {TARGET_S} s: {'yes' if help_ < TARGET_S else 'NO'}")
    return 0 if max(check, help_) < TARGET_S and check < TARGET_RATIO * torch_import else 1


if __name__ == "__main__":
    sys.exit(main())
