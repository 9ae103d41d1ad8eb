"""How long `gpudoc check` and `gpudoc --help` take next to importing torch, from one run.

    python bench/check_speed.py [--repeats 9]

Prints the median wall time of `python -m gpudoc check`, `python -m gpudoc --help`,
`python -c "import torch"` and `python -m torch.utils.collect_env`, and the ratios. Targets: check
and --help under 0.10 s, check under a quarter of the torch import. Every command runs once first so each is measured warm (bytecode
compiled, files in the page cache), the way a user's second run is.
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
TARGET_S = 0.10
TARGET_RATIO = 0.25


def timed(argv: list[str], env: dict, cwd: str | Path, repeats: int) -> list[float]:
    """Wall times of ``repeats`` runs of ``argv``, after one unmeasured warm-up run."""
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


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
