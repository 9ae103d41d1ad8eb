"""The estimator against the shared published cases, through the user's path.

Each case becomes a profile with only the SPEC's keys, its model given two ways — the family's
config.json (`hf_config`) or its shapes alone — and runs through `gpudoc estimate --json`: the
formula, then `--simulate` (the formula answers, and says why, where the simulation cannot rebuild
the model). Prints a table per family with each case's error, the median error, the signed mean and
the cases under-predicted by more than 10%, for each method and each way of giving the model.
Minutes: every case is simulated twice (the test suite runs the formula on all and the simulation
on a subset). Case ids as arguments run only those; `--formula` leaves the simulation out (seconds).

    .venv/bin/python bench/calibrate.py [--formula] [CASE_ID ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv: list[str]) -> int:
    methods = (False,) if "--formula" in argv else (False, True)
    argv = [a for a in argv if a != "--formula"]
    with tempfile.TemporaryDirectory() as tmp:
        # The simulation caches its results under XDG_CACHE_HOME: a fresh one, so every case runs.
        os.environ.update(HOME=tmp, XDG_CACHE_HOME=f"{tmp}/cache", XDG_STATE_HOME=f"{tmp}/state")
        from tests.conftest import MEMORY_CASES
        from tests.estimate.cases import load_records
        from tests.estimate.user_path import run_case, summary, table

        records = [r for r in load_records(MEMORY_CASES) if not argv or r["id"] in argv]
        lines = []
        for simulate in methods:
            for with_config in (True, False):
                name = f"{'simulation' if simulate else 'formula'}, model from {'config.json' if with_config else 'shapes'}"
                where = Path(tmp) / name.replace(" ", "_").replace(",", "")
                results = [run_case(r, where / r["id"], simulate=simulate, with_config=with_config) for r in records]
                print(table(name, results), flush=True)
                if simulate:
                    results = [x for x in results if x.source == "simulation"]
                    print(table(f"{name}, the simulated cases only", results), flush=True)
                s = summary(results)
                if s["n"]:
                    lines.append(f"{name}{', simulated only' if simulate else ''}: {s['n']} cases, median |error| "
                                 f"{s['median']:.1%}, mean {s['mean']:+.1%}, {s['under10']} under-predicted by >10%")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
