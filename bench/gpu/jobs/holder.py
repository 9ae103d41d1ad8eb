"""A process that holds GPU memory, for the check section: ``--orphan`` leaves it behind with its parent
gone (a stray, which ``gpudoc clean`` may end); without it, it stays its caller's child (a live job,
which ``gpudoc clean`` must leave). It writes its PID to ``--ready`` once the memory is held, and exits
by itself after ``--seconds`` whatever happens to the kit.

    python3 holder.py --gib 10 --ready FILE [--orphan] [--seconds 120]
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gib", type=float, required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--orphan", action="store_true")
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    if args.orphan and os.fork() != 0:
        os._exit(0)  # the parent goes at once: the child is re-parented, an orphan
    import torch

    held = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    tmp = f"{args.ready}.tmp"
    with open(tmp, "w") as out:
        out.write(str(os.getpid()))
    os.replace(tmp, args.ready)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
    del held
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
