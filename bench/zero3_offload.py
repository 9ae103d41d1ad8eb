"""DeepSpeed ZeRO-3 with parameter and optimizer offload on one GPU, against published figures,
through the user's path (`gpudoc estimate --json` on a profile with the SPEC's keys).

The figures: PEFT's README, "High performance on consumer hardware" (huggingface/peft, early 2023:
peft 0.2, DeepSpeed 0.8; one A100 80GB), column "PEFT-LoRA DeepSpeed with CPU Offloading", measured
by the example scripts as torch.cuda.max_memory_allocated over the training loop:
bigscience/T0_3B 9.8 GB, bigscience/mt0-xxl 22 GB, bigscience/bloomz-7b1 18.1 GB. The runs are the
shared cases peft-01/04/07 (the same models, batches and sequence lengths, trained whole) with LoRA
r = 8 on peft's default targets and accelerate's ZeRO-3 CPU-offload config (offload_param and
offload_optimizer on the CPU, DeepSpeed's defaults for the rest). Prints each case's error and the
regime's signed mean.

    .venv/bin/python bench/zero3_offload.py [--simulate]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MEASURED_GB = {"peft-01": 9.8, "peft-04": 22.0, "peft-07": 18.1}


def main(argv: list[str]) -> int:
    simulate = "--simulate" in argv
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(HOME=tmp, XDG_CACHE_HOME=f"{tmp}/cache", XDG_STATE_HOME=f"{tmp}/state")
        from tests.conftest import MEMORY_CASES
        from tests.estimate import user_path
        from tests.estimate.cases import load_records

        written = user_path.profile_toml

        def offloaded(r: dict, *, with_config: bool = True) -> str:
            # One GPU: the harness writes no zero_stage; the offload column's config is ZeRO-3's.
            return written(r, with_config=with_config).replace(
                "[train]\n", "[train]\nzero_stage = 3\noffload_params = true\n", 1)

        user_path.profile_toml = offloaded
        errors: dict[str, list[float]] = {"config.json": [], "shapes": []}
        for r in load_records(MEMORY_CASES):
            if r["id"] not in MEASURED_GB:
                continue
            r = {**r, "lora": {"rank": 8, "alpha": 32, "targets": "default"}, "outcome": "fits",
                 "measured_peak_value": MEASURED_GB[r["id"]], "measured_peak_unit": "GB",
                 "parallelism": {**r["parallelism"], "cpu_offload": True}}
            for with_config, name in ((True, "config.json"), (False, "shapes")):
                res = user_path.run_case(r, Path(tmp) / r["id"] / name, simulate=simulate, with_config=with_config)
                if res.error is None:  # every row here has its measured figure
                    continue
                errors[name].append(res.error)
                print(f"{r['id']:<8} {r['model']:<40} model from {name:<11} {res.source:<10} "
                      f"predicted {res.predicted / 1e9:6.2f} GB  measured {res.measured / 1e9:6.2f} GB  "
                      f"{res.error:+.1%}")
        for name, found in errors.items():
            print(f"model from {name}: mean {statistics.mean(found):+.1%}, "
                  f"{sum(e < -0.10 for e in found)} under-predicted by >10%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
