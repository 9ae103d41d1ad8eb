"""GPU health: ECC errors and retired pages, clock throttling."""

from __future__ import annotations

from gpudoc.checks._common import CheckContext, gpu_list, target_gpus
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile

ECC = "gpu.ecc"
THROTTLE = "gpu.throttle"

# Reasons that mean the hardware slows itself down (heat, power brake); a power cap under load and
# an idle GPU are normal.
_BAD = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "external power brake",
    "sw_thermal_slowdown": "driver thermal slowdown",
}
_NOTE = {"sw_power_cap": "power cap"}


def _reason(name: str) -> str:
    name = name.lower()
    for prefix in ("clocks_event_reason_", "clocks_throttle_reason_", "clocks_event_reasons.", "clocks_throttle_reasons."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def check_ecc(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    out: list[Finding] = []
    gpus = target_gpus(facts, profile, ctx)
    for g in gpus:
        if g.ecc_errors_uncorrected:
            out.append(Finding(
                ECC, Severity.FAIL, f"GPU {g.index}: {g.ecc_errors_uncorrected} uncorrectable ECC error(s) since the driver loaded",
                "results computed on this GPU may be wrong and CUDA calls can fail with \"uncorrectable ECC error\"",
                f"sudo nvidia-smi -r -i {g.index}  # reset (no process may use it), or reboot; "
                f"if it returns, avoid it: export CUDA_VISIBLE_DEVICES=<other GPUs>",
                (f"gpu:{g.index}",),
            ))
        if g.retired_pages_pending:
            out.append(Finding(
                ECC, Severity.WARN, f"GPU {g.index}: memory page retirement pending",
                "bad memory is retired only after a GPU reset or reboot",
                f"sudo nvidia-smi -r -i {g.index}  # or reboot", (f"gpu:{g.index}",),
            ))
        if g.ecc_errors_corrected:
            out.append(Finding(
                ECC, Severity.INFO, f"GPU {g.index}: {g.ecc_errors_corrected} corrected ECC error(s)",
                "corrected errors are harmless unless they grow quickly",
                f"nvidia-smi -q -d ECC -i {g.index}  # watch the volatile counts", (f"gpu:{g.index}",),
            ))
    if not out:
        modes = sorted({g.ecc_mode or "N/A" for g in gpus})
        out.append(Finding(ECC, Severity.OK, f"no ECC errors (ECC {', '.join(modes)})"))
    return out


def check_throttle(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    out: list[Finding] = []
    gpus = target_gpus(facts, profile, ctx)
    capped: list[int] = []
    for g in gpus:
        reasons = [_reason(r) for r in (g.throttle_reasons or ())]
        bad = [_BAD[r] for r in reasons if r in _BAD]
        if bad:
            temp = f" at {g.temperature_c:.0f} C" if g.temperature_c is not None else ""
            out.append(Finding(
                THROTTLE, Severity.WARN, f"GPU {g.index} is throttled{temp}: {', '.join(bad)}",
                "the clocks are held down: every step runs slower",
                f"nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {g.index}  # check fans and airflow", (f"gpu:{g.index}",),
            ))
        elif any(r in _NOTE for r in reasons):
            capped.append(g.index)
    if capped:
        out.append(Finding(
            THROTTLE, Severity.INFO, f"GPU {gpu_list(capped)} at the power cap",
            "normal under full load; a lowered cap slows training",
            f"nvidia-smi -q -d POWER -i {gpu_list(capped)}  # compare the power limit with the default limit",
            tuple(f"gpu:{i}" for i in capped),
        ))
    if not out:
        known = [g for g in gpus if g.throttle_reasons is not None]
        out.append(Finding(THROTTLE, Severity.OK, "no clock throttling" if known else "throttle reasons N/A (not reported)"))
    return out
