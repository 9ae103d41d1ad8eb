"""A real OOM chain: an HF Trainer job (``jobs/hf_train.py``, the estimate grid's Llama-style 1B) whose
first micro batch cannot fit the measured card, launched with no profile under ``gpudoc run
--retry-oom 4``. Records the attempts, the time to fit, the global batch before and after, what
gpudoc read from the command, what the probe observed inside the job (when gpudoc has one), the OOM's
phase and breakdown, and what ``fix`` says of the first failure.
"""

from __future__ import annotations

import json
from datetime import datetime

from grid import PER_SAMPLE_PAIR
from runner import JOBS, Kit, Result, SectionSkipped

GIB = 2**30
RETRIES = 4
SEQ = 2048
# Without the estimate section's two measured micro batches (an ``--only oom_chain`` rerun): a 1.2B
# full fine-tune under bf16 autocast holds about 20 GiB of weights, gradients and AdamW states, and
# about 6 GiB a sample of 2048 tokens (activations and 128k-token logits).
FALLBACK_FIXED, FALLBACK_PER_SAMPLE = 20 * GIB, 6 * GIB
OVERSHOOT = 1.5  # the first micro batch asks for at least 1.5 times the card
_READ_BACK_S = 15


def _knob(record: dict, name: str) -> object:
    return ((record.get("profile") or {}).get("knobs") or {}).get(name, {}).get("value")


def _global_batch(record: dict) -> int | None:
    micro, accumulation = _knob(record, "micro_batch_size"), _knob(record, "gradient_accumulation_steps") or 1
    world = _knob(record, "world_size") or 1
    if not all(isinstance(n, int) for n in (micro, accumulation, world)):
        return None
    return int(micro) * int(accumulation) * int(world)  # type: ignore[call-overload]


def _memory_model(kit: Kit) -> tuple[int, int, str]:
    """(fixed bytes, bytes per sample, where they came from) for the chain's model at sequence 2048."""
    estimate = kit.state / "estimate.json"
    if estimate.exists():
        cases = json.loads(estimate.read_text()).get("cases") or {}
        one, two = (((cases.get(name) or {}).get("measured") or {}).get("allocated") or {} for name in PER_SAMPLE_PAIR)
        if one.get("steady_state") and two.get("steady_state"):
            per_sample = two["steady_state"] - one["steady_state"]
            return one["steady_state"] - per_sample, per_sample, "measured by the estimate section"
    return FALLBACK_FIXED, FALLBACK_PER_SAMPLE, "fallback figures (the estimate section did not measure them)"


def _seconds(a: str, b: str) -> float:
    fmt = "%Y-%m-%dT%H:%M:%S%z"
    return (datetime.strptime(b, fmt) - datetime.strptime(a, fmt)).total_seconds()


def run(kit: Kit, result: Result) -> None:
    check = kit.gpudoc("check", "--json", timeout=20).json()
    gpus = check["facts"].get("gpus") or []
    capacity = int(gpus[0].get("memory_total_bytes") or 80 * 10**9) if gpus else 80 * 10**9
    fixed, per_sample, source = _memory_model(kit)
    micro = 1
    while fixed + micro * per_sample < OVERSHOOT * capacity:
        micro *= 2
    result["card_bytes"] = capacity
    result["sizing"] = {"fixed_bytes": fixed, "per_sample_bytes": per_sample, "source": source,
                        "first_micro_batch_size": micro}
    work = kit.work / "oom_chain"
    work.mkdir(parents=True, exist_ok=True)
    job = [kit.python, str(JOBS / "hf_train.py"), "--output_dir", str(work / "out"),
           "--per_device_train_batch_size", str(micro), "--gradient_accumulation_steps", "1",
           "--max_steps", "2", "--bf16", "--report_to", "none", "--save_strategy", "no",
           "--logging_steps", "1", "--max_seq_length", str(SEQ)]
    dry = kit.gpudoc("run", "--dry-run", "--json", "--", *job, cwd=work, timeout=30).json()
    result["read_before_launch"] = {b["knob"]: {"value": b["new"], "where": b["where"]}
                                    for b in dry.get("bindings") or []}
    if kit.cpu or not gpus:
        raise SectionSkipped("no CUDA: the command was read (--dry-run), not launched")
    switches = ["--retry-oom", str(RETRIES)]
    if any(f.get("severity") == "fail" for f in check.get("findings", [])):
        switches.append("--no-check")  # a failing check would refuse the launch this section measures
        result["no_check_because"] = [f["id"] for f in check["findings"] if f.get("severity") == "fail"]
    # What the chain leaves of the section's time, less what reading its records back takes.
    chain = kit.gpudoc("run", *switches, "--", *job, cwd=work, timeout=kit.remaining() - _READ_BACK_S)
    result["exit_code"] = chain.returncode
    result["wall_seconds"] = round(chain.seconds, 1)
    result["gpudoc_lines"] = [line for line in chain.stderr.splitlines() if line.startswith("gpudoc:")][-12:]
    records = sorted(kit.gpudoc("runs", "--json", cwd=work, timeout=20).json().get("runs") or [],
                     key=lambda r: r.get("started_at") or "")
    attempts = []
    for record in records:
        doc = kit.gpudoc("runs", "show", record["id"], "--json", cwd=work, timeout=20).json()
        shown = {key: doc.get(key, (doc.get("run") or {}).get(key)) for key in ("observed", "steps", "oom")}
        attempts.append({
            "id": record["id"], "exit_code": record.get("exit_code"), "cause": record.get("cause"),
            "duration_s": record.get("duration_s"),
            "micro_batch_size": _knob(record, "micro_batch_size"),
            "gradient_accumulation_steps": _knob(record, "gradient_accumulation_steps"),
            "peak_memory_bytes": record.get("peak_memory_bytes"),
            "env_set": record.get("env_set"),
            "observed": shown.get("observed"), "steps": shown.get("steps"), "oom": shown.get("oom"),
        })
    result["attempts"] = attempts
    if not records:
        result["status"], result["reason"] = "fail", f"no run record: {chain.tail()}"
        return
    first, last = records[0], records[-1]
    result["time_to_fit_s"] = _seconds(first["started_at"], last["ended_at"]) if last.get("exit_code") == 0 else None
    result["global_batch"] = {"before": _global_batch(first), "after": _global_batch(last)}
    probe = [a for a in attempts if a["observed"] is not None]
    result["probe"] = ("observed by the probe in every attempt" if len(probe) == len(attempts) else
                       f"observed in {len(probe)} of {len(attempts)} attempts" if probe else
                       "nothing observed: this gpudoc has no probe in the job (runs show --json has no 'observed')")
    failed = next((r for r in records if r.get("cause") == "gpu_oom"), None)
    if failed is not None:
        fix = kit.gpudoc("fix", failed["id"], "--json", cwd=work, timeout=30).json()
        result["fix"] = {"diagnosis": fix.get("diagnosis"),
                         "suggestions": [s.get("rung") or s.get("name") for s in fix.get("suggestions") or []],
                         "top": ((fix.get("diagnosis") or {}).get("oom") or {}).get("top")}
    # A relaunch that ran out of memory again records PyTorch's memory history ([run] snapshot's default).
    relaunched_ooms = [a for a in attempts[1:] if a["cause"] == "gpu_oom"]
    result["snapshots"] = [{"id": a["id"], "snapshot": (a["oom"] or {}).get("snapshot"),
                            "top": (a["oom"] or {}).get("top")} for a in relaunched_ooms]
    verdicts = {
        "the first attempt ran out of GPU memory": first.get("cause") == "gpu_oom",
        "the probe named the OOM's phase and what filled the card": _named(attempts[0]["oom"]),
        "a relaunch that ran out of memory dumped its memory history": all(s["snapshot"] and s["top"]
                                                                           for s in result["snapshots"]),
        "the chain ended in a run that fits": last.get("exit_code") == 0,
        "the global batch is kept": result["global_batch"]["before"] == result["global_batch"]["after"],
        "the run that fits kept its step time and the allocator's own peaks against the card":
            _allocator_steps(attempts[-1]["steps"]),
    }
    result["checks"] = verdicts
    missing = [name for name, ok in verdicts.items() if not ok]
    result["status"] = "fail" if missing else "pass"
    result["reason"] = ("not: " + "; ".join(missing)) if missing else (
        f"fit after {len(records)} attempts in {result['time_to_fit_s']:.0f} s, global batch "
        f"{result['global_batch']['before']} kept")


def _named(oom: dict | None) -> bool:
    """The probe's record of an OOM on a GPU: its phase, and a breakdown by kind in which the
    parameters and the rest (activations, temporaries) hold bytes."""
    breakdown = (oom or {}).get("breakdown") or {}
    return bool((oom or {}).get("phase") and breakdown.get("parameters") and breakdown.get("other"))


def _allocator_steps(steps: dict | None) -> bool:
    """The probe's per-step figures on a GPU: step time, the job's running peaks (reserved holds at
    least what was allocated), the card's capacity as the job saw it, and the bounded series."""
    steps = steps or {}
    allocated, reserved, capacity = (steps.get(k) for k in ("peak_allocated_bytes", "peak_reserved_bytes",
                                                            "capacity_bytes"))
    return bool(steps.get("seconds_per_step") and allocated and reserved and capacity
                and allocated <= reserved <= capacity and steps.get("series"))
