"""The host around the GPUs: /dev/shm, RAM for CPU offload, disk where the run's logs go."""

from __future__ import annotations

from gpudoc.checks._common import CheckContext, has_profile, is_multi_process, procs_per_node, profile_name
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile
from gpudoc.units import GIB, MIB, format_bytes

SHM = "host.shm"
RAM_OFFLOAD = "host.ram-offload"
DISK = "host.disk"

SHM_WARN = GIB  # DataLoader workers pass every batch through /dev/shm
SHM_FAIL_MULTI = 256 * MIB  # NCCL's intra-node buffers for a few ranks do not fit below this
DISK_WARN = 2 * GIB
DISK_FAIL = 100 * MIB

# Bytes per parameter that ZeRO-Offload keeps in host RAM: fp32 master weights + optimizer state
# (+ fp32 gradients); offloading parameters adds their 16-bit copy.
_OFFLOAD_OPTIMIZER_BYTES = {"adamw": 16, "adam": 16, "adamw_8bit": 10, "adafactor": 10, "sgd": 12}
_OFFLOAD_PARAMS_BYTES = 2


def check_shm(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    host = facts.host
    total = host.shm_total_bytes if host else None
    if total is None:
        return Finding(SHM, Severity.SKIP, "/dev/shm N/A", (host.unavailable or {}).get("shm_total_bytes", "") if host else "",
                       "df -h /dev/shm")
    container = bool(host.in_container)
    grow = ("restart the container with `--shm-size=16g` (or `--ipc=host`)" if container
            else "sudo mount -o remount,size=16G /dev/shm")
    multi = is_multi_process(profile)
    if total < SHM_FAIL_MULTI and multi:
        return Finding(
            SHM, Severity.FAIL, f"/dev/shm is {format_bytes(total)}: too small for {procs_per_node(profile)} NCCL ranks",
            "NCCL fails with \"unhandled system error\" and DataLoader workers with \"bus error\"", grow, ("/dev/shm",),
        )
    if total < SHM_WARN:
        return Finding(
            SHM, Severity.WARN, f"/dev/shm is {format_bytes(total)}",
            "DataLoader workers (num_workers > 0) pass batches through shared memory: expect \"bus error\" or "
            "\"No space left on device\" (a container's default is 64 MiB)", grow, ("/dev/shm",),
        )
    free = host.shm_free_bytes
    if free is not None and free < min(SHM_WARN, total // 10):
        return Finding(
            SHM, Severity.WARN, f"/dev/shm is nearly full: {format_bytes(free)} free of {format_bytes(total)}",
            "leftover segments of crashed jobs keep shared memory allocated",
            "find /dev/shm -maxdepth 1 -user \"$USER\" -mmin +60 -ls  # then rm the dead jobs' files", ("/dev/shm",),
        )
    return Finding(SHM, Severity.OK, f"/dev/shm {format_bytes(total)}" + (f", {format_bytes(free)} free" if free is not None else ""))


def check_ram_offload(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    if not has_profile(profile):
        return Finding(RAM_OFFLOAD, Severity.SKIP, "host RAM for CPU offload: no profile",
                       "applies when the profile offloads the optimizer or parameters", "gpudoc check -p PROFILE")
    train = profile.train
    opt_off, par_off = bool(train.get("offload_optimizer")), bool(train.get("offload_params"))
    if not (opt_off or par_off):
        return Finding(RAM_OFFLOAD, Severity.SKIP, "host RAM for CPU offload: the profile does not offload", "")
    avail = facts.host.ram_available_bytes if facts.host else None
    params = profile.model.get("params")
    if avail is None:
        return Finding(RAM_OFFLOAD, Severity.SKIP, "host RAM N/A", "", "free -g")
    if not params:
        return Finding(
            RAM_OFFLOAD, Severity.INFO, f"CPU offload with {format_bytes(avail)} RAM available; model size unknown",
            "without [model] params gpudoc cannot size the offloaded state",
            f"params = <parameter count> in [model] of {profile_name(profile, ctx)}",
        )
    trainable = float(params)
    if int(train.get("lora_rank") or 0) > 0:
        trainable *= 0.02  # adapters: a few percent of the base model; the base stays on the GPU
    per_param = 0
    if opt_off:
        per_param += _OFFLOAD_OPTIMIZER_BYTES.get(str(train.get("optimizer", "adamw")).lower(), 16)
    need = trainable * per_param + (float(params) * _OFFLOAD_PARAMS_BYTES if par_off else 0)
    nnodes = int(profile.launch.get("nnodes") or 1)
    need = int(need / nnodes)  # ZeRO partitions the offloaded state over every rank of every node
    what = " + ".join(x for x in ("optimizer" if opt_off else "", "parameters" if par_off else "") if x)
    title = f"CPU offload ({what}) needs about {format_bytes(need)} host RAM, {format_bytes(avail)} available"
    detail = "rough: ZeRO-Offload keeps fp32 master weights, optimizer state and gradients in pinned host memory"
    if need > avail:
        return Finding(RAM_OFFLOAD, Severity.FAIL, title, detail + "; the kernel OOM killer ends the job (exit -9)",
                       f"offload_params = false in [train] of {profile_name(profile, ctx)}, or free RAM (`free -g`)",
                       ("host:ram",))
    if need > avail * 0.8:
        return Finding(RAM_OFFLOAD, Severity.WARN, title, detail + "; DataLoader workers need RAM too",
                       "free -g  # close other jobs, or lower num_workers", ("host:ram",))
    return Finding(RAM_OFFLOAD, Severity.OK, title, detail)


def check_disk(facts: Facts, profile: Profile, ctx: CheckContext) -> Finding:
    host = facts.host
    free = host.runs_dir_free_bytes if host else None
    where = (host.runs_dir if host else None) or ".gpudoc/runs"
    if free is None:
        return Finding(DISK, Severity.SKIP, "free disk N/A", f"runs directory: {where}", f"df -h {where}")
    if free < DISK_FAIL:
        return Finding(DISK, Severity.FAIL, f"{format_bytes(free)} free where run logs go ({where})",
                       "the run's log and record cannot be written; checkpoints on the same disk fail too",
                       "export GPUDOC_HOME=/path/with/space  # or free space: du -sh .gpudoc/runs", ("disk",))
    if free < DISK_WARN:
        return Finding(DISK, Severity.WARN, f"{format_bytes(free)} free where run logs go ({where})",
                       "a long job's log and checkpoints can fill it",
                       "export GPUDOC_HOME=/path/with/space  # or free space: du -sh .gpudoc/runs", ("disk",))
    return Finding(DISK, Severity.OK, f"{format_bytes(free)} free where run logs go ({where})")
