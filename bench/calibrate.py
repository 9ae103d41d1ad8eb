"""The estimator against the shared published cases, through the user's path.

Each case becomes a profile with only the SPEC's keys (and its family's config.json), run through
`gpudoc estimate --json`: the formula on every case, then `--simulate` on every case (the formula
answers, and says why, where the simulation cannot rebuild the model). Prints a table per family
with each case's error, the median error and the cases under-predicted by more than 10%. Minutes:
every case is simulated (the test suite runs the formula on all and the simulation on a subset).

    .venv/bin/python bench/calibrate.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        # The simulation caches its results under XDG_CACHE_HOME: a fresh one, so every case runs.
        os.environ.update(HOME=tmp, XDG_CACHE_HOME=f"{tmp}/cache", XDG_STATE_HOME=f"{tmp}/state")
        from tests.conftest import MEMORY_CASES
        from tests.estimate.cases import load_records
        from tests.estimate.user_path import run_case, summary, table

        records = load_records(MEMORY_CASES)
        formula = [run_case(r, Path(tmp) / "formula" / r["id"]) for r in records]
        print(table("formula, profile with config.json", formula))
        simulated = [run_case(r, Path(tmp) / "simulate" / r["id"], simulate=True) for r in records]
        print(table("simulation (the formula where it cannot run)", simulated))
        only = [x for x in simulated if x.source == "simulation"]
        print(table("simulation only", only))
        for name, results in (("formula", formula), ("simulation", only)):
            s = summary(results)
            print(f"{name}: {s['n']} cases, median |error| {s['median']:.1%}, {s['under10']} under-predicted by >10%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
