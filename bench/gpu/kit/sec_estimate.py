"""The estimate against the real allocator: the grid's steps measured on the GPU (``jobs/steps.py``)
while ``gpudoc estimate --json`` and ``--simulate`` answer for the same cases, through the user's
path (a profile with the SPEC's keys in a directory of its own, the CLI in its own process).

The formula's ``peak_bytes`` is held to the larger measured phase (it predicts the run's
``max_memory_allocated``); the simulation's ``phases`` to each measured phase.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from grid import cases, write_case
from runner import Kit, Result, error_summary

# The estimator's own targets (the estimate issue): the formula's median |error| and the simulation's.
FORMULA_TARGET = 0.05
SIMULATION_TARGET = 0.03
_PARALLEL_ESTIMATES = 8  # simulations are CPU work on meta tensors: the lent machine has 16 cores


def _predict(kit: Kit, case: dict, simulate: bool) -> dict:
    directory = write_case(case, kit.work / "estimate" / case["id"])
    args = ["estimate", "--json"] + (["--simulate", "--python", kit.python] if simulate else [])
    done = kit.gpudoc(*args, cwd=directory, timeout=75)
    try:
        doc = done.json()
    except RuntimeError as exc:
        return {"error": str(exc)}
    if doc.get("status") == "error":
        return {"error": (doc.get("error") or {}).get("message") or doc.get("message")}
    return {"peak_bytes": doc.get("peak_bytes"), "phases": doc.get("phases"), "source": doc.get("source"),
            "notes": doc.get("notes") or [], "seconds": round(done.seconds, 1)}


def _error(predicted: int | None, measured: int | None) -> float | None:
    return None if not predicted or not measured else (predicted - measured) / measured


def run(kit: Kit, result: Result) -> None:
    plan = cases()
    result["cases"] = {c["id"]: {"case": {k: c[k] for k in ("precision", "gradient_checkpointing", "lora_rank",
                                                            "max_seq_len", "micro_batch_size")}} for c in plan}
    plan_file, measured_file = kit.work / "grid.json", kit.work / "grid-measured.jsonl"
    plan_file.write_text(json.dumps(plan))
    measured_file.unlink(missing_ok=True)
    with ThreadPoolExecutor(max_workers=_PARALLEL_ESTIMATES + 1) as pool:
        gpu = None if kit.cpu else pool.submit(kit.job, "steps.py", str(plan_file), str(measured_file))
        formula = {c["id"]: pool.submit(_predict, kit, c, False) for c in plan}
        simulated = {} if kit.cpu else {c["id"]: pool.submit(_predict, kit, c, True) for c in plan}
        for case_id, future in formula.items():
            result["cases"][case_id]["formula"] = future.result()
        result.save()
        for case_id, future in simulated.items():
            result["cases"][case_id]["simulation"] = future.result()
            result.save()
        if gpu is not None:
            done = gpu.result()
            result["steps_seconds"] = round(done.seconds, 1)
            if done.returncode != 0:
                result["steps_error"] = done.tail()
    if kit.cpu:
        result["status"] = "skipped"
        result["reason"] = "no CUDA: the formula answered for every case; nothing measured, nothing simulated"
        return
    rows = [json.loads(line) for line in measured_file.read_text().splitlines()] if measured_file.exists() else []
    formula_errors: list[float] = []
    simulation_errors: dict[str, list[float]] = {"first_step": [], "steady_state": []}
    for row in rows:
        entry = result["cases"][row["id"]]
        entry["measured"] = row
        allocated = row.get("allocated") or {}
        if not allocated:
            continue
        f = _error((entry.get("formula") or {}).get("peak_bytes"), max(allocated.values()))
        entry["formula_error"] = f
        if f is not None:
            formula_errors.append(f)
        phases = (entry.get("simulation") or {}).get("phases") or {}
        if (entry.get("simulation") or {}).get("source") == "simulation":
            entry["simulation_error"] = {}
            for phase, errors in simulation_errors.items():
                e = _error(phases.get(phase), allocated.get(phase))
                entry["simulation_error"][phase] = e
                if e is not None:
                    errors.append(e)
    result["measured_cases"] = sum(1 for r in rows if r.get("allocated"))
    result["formula"] = error_summary(formula_errors)
    result["simulation"] = {phase: error_summary(errors) for phase, errors in simulation_errors.items()}
    sim = result["simulation"]["steady_state"]
    verdicts = {
        "every case measured": result["measured_cases"] == len(plan),
        f"formula median <= {FORMULA_TARGET:.0%}": (result["formula"]["median_abs_error"] or 1) <= FORMULA_TARGET,
        f"simulation median <= {SIMULATION_TARGET:.0%}": (sim["median_abs_error"] or 1) <= SIMULATION_TARGET,
        "no under-prediction > 10%": result["formula"]["under_by_more_than_10pct"] == 0
        and all(s["under_by_more_than_10pct"] == 0 for s in result["simulation"].values()),
    }
    result["checks"] = verdicts
    failed = [name for name, ok in verdicts.items() if not ok]
    result["status"] = "fail" if failed else "pass"
    result["reason"] = ("not: " + "; ".join(failed)) if failed else "within the estimator's targets"
