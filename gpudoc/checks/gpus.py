"""Which GPUs the job sees (CUDA_VISIBLE_DEVICES vs the profile), MIG, compute and persistence mode."""

from __future__ import annotations

from gpudoc.checks._common import (
    CheckContext,
    effective_env,
    free_bytes,
    gpu_list,
    mig_enabled,
    procs_per_node,
    profile_name,
    set_remedy,
    target_gpus,
    visibility,
)
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile
from gpudoc.units import format_bytes

VISIBLE = "gpu.visible"
MIG = "gpu.mig"
COMPUTE_MODE = "gpu.compute-mode"
PERSISTENCE = "gpu.persistence"


def _freest(facts: Facts, n: int) -> list[int]:
    ranked = sorted(facts.gpus, key=lambda g: (-(free_bytes(g) or 0), g.index))
    return sorted(g.index for g in ranked[:n])


def check_visible(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    env = effective_env(facts, profile)
    vis = visibility(facts, env)
    need = procs_per_node(profile)
    out: list[Finding] = []
    cvd = f"CUDA_VISIBLE_DEVICES={vis.raw!r}" if vis.raw is not None else "CUDA_VISIBLE_DEVICES unset"
    if vis.hidden_all:
        fix = _freest(facts, need or len(facts.gpus))
        detail = f"{cvd}; the machine has {len(facts.gpus)} GPU(s)"
        if vis.problems:
            detail += "; " + "; ".join(vis.problems)
        out.append(Finding(
            VISIBLE, Severity.FAIL, "CUDA_VISIBLE_DEVICES hides every GPU: the job would run on the CPU or fail",
            detail, set_remedy("CUDA_VISIBLE_DEVICES", gpu_list(fix), profile, ctx), ("CUDA_VISIBLE_DEVICES",),
        ))
        return out
    for problem in vis.problems:
        out.append(Finding(
            VISIBLE, Severity.WARN, f"CUDA_VISIBLE_DEVICES: {problem}", cvd,
            set_remedy("CUDA_VISIBLE_DEVICES", gpu_list(g.index for g in vis.gpus) or "0", profile, ctx),
            ("CUDA_VISIBLE_DEVICES",),
        ))
    if vis.duplicates:
        out.append(Finding(
            VISIBLE, Severity.WARN, f"CUDA_VISIBLE_DEVICES names a device twice ({', '.join(vis.duplicates)})",
            f"{cvd}; CUDA fails to initialise or counts the device once",
            set_remedy("CUDA_VISIBLE_DEVICES", gpu_list(g.index for g in vis.gpus), profile, ctx),
            ("CUDA_VISIBLE_DEVICES",),
        ))
    names = {g.name for g in vis.gpus if g.name}
    order = env.get("CUDA_DEVICE_ORDER")
    if vis.raw is not None and len({g.name for g in facts.gpus if g.name}) > 1 and order != "PCI_BUS_ID":
        out.append(Finding(
            VISIBLE, Severity.WARN,
            "mixed GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA indexes differ from nvidia-smi's",
            f"{cvd}; CUDA numbers the fastest GPU first, nvidia-smi by PCI bus ({', '.join(sorted(names))})",
            set_remedy("CUDA_DEVICE_ORDER", "PCI_BUS_ID", profile, ctx), ("CUDA_DEVICE_ORDER",),
        ))
    shown = gpu_list(g.index for g in vis.gpus) or ", ".join(vis.mig_entries)
    if need is not None:
        if vis.count < need:
            if len(facts.gpus) >= need and not vis.mig_entries:
                remedy = set_remedy("CUDA_VISIBLE_DEVICES", gpu_list(_freest(facts, need)), profile, ctx)
            else:
                remedy = f"nproc_per_node = {max(vis.count, 1)} in [launch] of {profile_name(profile, ctx)}"
            out.append(Finding(
                VISIBLE, Severity.FAIL,
                f"the profile needs {need} GPUs per node, {vis.count} visible",
                f"{cvd}; visible: {shown or 'none'}", remedy, ("CUDA_VISIBLE_DEVICES", "launch.nproc_per_node"),
            ))
            return out
        if vis.count > need:
            first = [g.index for g in vis.gpus[:need]]
            # Unpinned, rank r takes cuda:r: propose the GPUs with the most free memory instead.
            pick = _freest(facts, need) if vis.raw is None else first
            title = f"{vis.count} GPUs visible, the job uses {need}: ranks take GPU {gpu_list(first)}"
            if pick != first:
                title += f"; the freest are {gpu_list(pick)}"
            out.append(Finding(
                VISIBLE, Severity.INFO, title,
                f"{cvd}; pin the GPUs so a later job does not pick the same ones",
                set_remedy("CUDA_VISIBLE_DEVICES", gpu_list(pick), profile, ctx), ("CUDA_VISIBLE_DEVICES",),
            ))
            return out
    if not out:
        needs = f", profile needs {need}" if need is not None else ""
        out.append(Finding(VISIBLE, Severity.OK, f"{vis.count} GPU(s) visible ({shown}){needs}", cvd))
    return out


def check_mig(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    env = effective_env(facts, profile)
    gpus = target_gpus(facts, profile, ctx)
    migged = [g for g in gpus if mig_enabled(g)]
    if not migged:
        unknown = [g for g in gpus if g.mig is None]
        if gpus and len(unknown) == len(gpus):
            return [Finding(MIG, Severity.OK, "MIG not reported (N/A: not a MIG-capable GPU or not in the source)")]
        return [Finding(MIG, Severity.OK, "MIG disabled")]
    out: list[Finding] = []
    vis = visibility(facts, env)
    for g in migged:
        devices = (g.mig or {}).get("devices") or []
        sizes = ", ".join(format_bytes(d.get("memory_total_bytes")) for d in devices if isinstance(d, dict))
        detail = f"{len(devices)} MIG instance(s)" + (f": {sizes}" if sizes else "")
        uuids = [str(d["uuid"]) for d in devices if isinstance(d, dict) and d.get("uuid")]
        if not vis.mig_entries:
            remedy = (set_remedy("CUDA_VISIBLE_DEVICES", uuids[0], profile, ctx) if uuids
                      else "nvidia-smi -L  # then export CUDA_VISIBLE_DEVICES=MIG-<uuid>")
            out.append(Finding(
                MIG, Severity.WARN,
                f"GPU {g.index} is in MIG mode and CUDA_VISIBLE_DEVICES names no MIG instance",
                detail + "; a CUDA process uses one MIG instance, and without a MIG UUID it gets the first one",
                remedy, (f"gpu:{g.index}",),
            ))
        else:
            out.append(Finding(MIG, Severity.INFO, f"GPU {g.index} is in MIG mode", detail,
                               "nvidia-smi -L  # MIG UUIDs for CUDA_VISIBLE_DEVICES", (f"gpu:{g.index}",)))
    need = procs_per_node(profile)
    if need and need > 1:
        out.append(Finding(
            MIG, Severity.WARN,
            f"the profile runs {need} processes per node on MIG: each rank needs its own MIG instance",
            "torchrun's cuda:LOCAL_RANK does not reach a second MIG instance; NCCL has no P2P between instances",
            f"nproc_per_node = 1 in [launch] of {profile_name(profile, ctx)}, or `sudo nvidia-smi -i {migged[0].index} -mig 0` to leave MIG mode",
            ("launch.nproc_per_node",),
        ))
    return out


def check_compute_mode(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    gpus = target_gpus(facts, profile, ctx)
    out: list[Finding] = []
    for g in gpus:
        mode = (g.compute_mode or "").replace(" ", "_")
        if mode.lower() == "prohibited":
            out.append(Finding(
                COMPUTE_MODE, Severity.FAIL, f"GPU {g.index} compute mode is Prohibited: no process may use it",
                "set by an administrator", f"sudo nvidia-smi -i {g.index} -c DEFAULT", (f"gpu:{g.index}",),
            ))
        elif mode.lower().startswith("exclusive"):
            holders = [p for p in (g.processes or ()) if p.pid]
            if holders:
                out.append(Finding(
                    COMPUTE_MODE, Severity.FAIL,
                    f"GPU {g.index} is {g.compute_mode} and already used by PID {', '.join(str(p.pid) for p in holders)}",
                    "an exclusive GPU takes one CUDA context: the job cannot start on it",
                    f"gpudoc clean --gpus {g.index}  # or: sudo nvidia-smi -i {g.index} -c DEFAULT",
                    (f"gpu:{g.index}",),
                ))
            else:
                out.append(Finding(
                    COMPUTE_MODE, Severity.INFO, f"GPU {g.index} is {g.compute_mode}",
                    "one CUDA context at a time: fine for one rank per GPU, fatal for a second process "
                    "(e.g. a DataLoader worker that touches CUDA)",
                    f"sudo nvidia-smi -i {g.index} -c DEFAULT", (f"gpu:{g.index}",),
                ))
    if not out:
        modes = sorted({g.compute_mode or "N/A" for g in gpus})
        out.append(Finding(COMPUTE_MODE, Severity.OK, f"compute mode {', '.join(modes)}"))
    return out


def check_persistence(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    gpus = target_gpus(facts, profile, ctx)
    off = [g.index for g in gpus if (g.persistence_mode or "").lower() == "disabled"]
    if off:
        return Finding(
            PERSISTENCE, Severity.INFO, f"persistence mode off on GPU {gpu_list(off)}",
            "the driver unloads between jobs: each CUDA start pays a few seconds of initialisation",
            f"sudo nvidia-smi -i {gpu_list(off)} -pm 1  # or run nvidia-persistenced", tuple(f"gpu:{i}" for i in off),
        )
    known = [g for g in gpus if g.persistence_mode]
    if not known:
        return Finding(PERSISTENCE, Severity.OK, "persistence mode N/A (not reported)")
    return Finding(PERSISTENCE, Severity.OK, "persistence mode on")

