"""The check catalogue: pure functions from (facts, profile, context) to findings.

Ids are stable, dotted kebab-case; the group is the part before the dot. ``run_checks`` runs the
catalogue in order; a check that raises becomes an ``error`` finding and the others still run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gpudoc.checks import allocator, driver, env, gpus, health, host, memory, processes
from gpudoc.checks._common import CheckContext, has_profile
from gpudoc.errors import UsageError
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import EMPTY, Profile

GROUPS = {
    "driver": "Driver",
    "gpu": "GPUs",
    "proc": "Processes",
    "env": "Environment",
    "host": "Host",
}


@dataclass(frozen=True)
class Check:
    id: str
    group: str
    title: str
    func: Callable[[Facts, Profile, CheckContext], Finding | Iterable[Finding]]
    # "gpus": skipped when no GPU facts; "profile": skipped without one; "host": skipped when the
    # facts say nothing of the host (a saved nvidia-smi file), rather than judging this machine's.
    needs: tuple[str, ...] = ()


CATALOGUE: tuple[Check, ...] = (
    Check(driver.NVML, "driver", "NVIDIA driver and NVML", driver.check_nvml),
    Check(driver.TORCH_CUDA, "driver", "torch's CUDA build vs the driver", driver.check_torch_cuda),
    Check(gpus.VISIBLE, "gpu", "GPUs visible vs CUDA_VISIBLE_DEVICES vs the profile", gpus.check_visible, ("gpus",)),
    Check(memory.FREE_MEMORY, "gpu", "free memory per GPU vs the job's need", memory.check_free_memory, ("gpus",)),
    Check(processes.STRAY, "proc", "processes holding GPU memory", processes.check_stray, ("gpus",)),
    Check(allocator.ALLOC_CONF, "env", "allocator variable (PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF)",
          allocator.check_alloc_conf),
    Check(env.TOKENIZERS, "env", "TOKENIZERS_PARALLELISM", env.check_tokenizers),
    Check(env.OMP, "env", "OMP_NUM_THREADS vs CPUs per process", env.check_omp, ("host",)),
    Check(env.CUDA_DEBUG, "env", "CUDA_LAUNCH_BLOCKING and other performance-limiting variables", env.check_cuda_debug),
    Check(env.NCCL, "env", "NCCL fail-fast settings for multi-process jobs", env.check_nccl, ("profile",)),
    Check(host.SHM, "host", "/dev/shm size", host.check_shm, ("host",)),
    Check(host.RAM_OFFLOAD, "host", "host RAM for CPU offload", host.check_ram_offload, ("profile", "host")),
    Check(host.DISK, "host", "free disk where run logs go", host.check_disk, ("host",)),
    Check(health.ECC, "gpu", "ECC errors and retired pages", health.check_ecc, ("gpus",)),
    Check(health.THROTTLE, "gpu", "clock throttling", health.check_throttle, ("gpus",)),
    Check(gpus.MIG, "gpu", "MIG mode", gpus.check_mig, ("gpus",)),
    Check(gpus.COMPUTE_MODE, "gpu", "compute mode", gpus.check_compute_mode, ("gpus",)),
    Check(gpus.PERSISTENCE, "gpu", "persistence mode", gpus.check_persistence, ("gpus",)),
)

IDS = tuple(c.id for c in CATALOGUE)


def select(only: Iterable[str] = (), skip: Iterable[str] = (), *,
           catalogue: Sequence[Check] = CATALOGUE) -> list[Check]:
    """The checks to run. ``only``/``skip`` take ids or group names (``env``); unknown ones are a
    usage error with a did-you-mean."""
    wanted, unwanted = _expand(only, "--only"), _expand(skip, "--skip")
    return [c for c in catalogue if (not wanted or c.id in wanted) and c.id not in unwanted]


def _expand(names: Iterable[str], switch: str) -> set[str]:
    out: set[str] = set()
    for raw in names:
        for name in filter(None, (n.strip() for n in raw.split(","))):
            if name in IDS:
                out.add(name)
            elif name in GROUPS:
                out.update(c.id for c in CATALOGUE if c.group == name)
            else:
                import difflib  # only on a mistake

                close = difflib.get_close_matches(name, [*IDS, *GROUPS], n=1, cutoff=0.5)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise UsageError(f"{switch}: unknown check '{name}'{hint}; `gpudoc check --list-checks` lists them")
    return out


def _skip_reason(check: Check, facts: Facts, profile: Profile) -> Finding | None:
    if "gpus" in check.needs and not facts.gpus:
        why = "no GPU facts (see driver.nvml)" if facts.nvml_error or facts.source == "none" else "no GPU in the facts"
        return Finding(check.id, Severity.SKIP, f"{check.title}: skipped", why,
                       "gpudoc check --snapshot nvidia-smi.xml  # to check a saved machine state")
    if "profile" in check.needs and not has_profile(profile):
        return Finding(check.id, Severity.SKIP, f"{check.title}: no profile", "this check needs the job's profile",
                       "gpudoc check -p PROFILE")
    if "host" in check.needs and _host_unknown(facts):
        snapshot = facts.source.startswith("snapshot")
        title = f"{check.title}: not checked" + (" (the snapshot has no host facts)" if snapshot else "")
        remedy = ("on that machine: gpudoc check --json > facts.json  # its host facts; pass that to --snapshot"
                  if snapshot else "nproc; free -g; df -h /dev/shm .  # what gpudoc could not read")
        return Finding(check.id, Severity.SKIP, title, facts.host.unavailable.get("host", ""), remedy)
    return None


def _host_unknown(facts: Facts) -> bool:
    """Host facts were not gathered at all (as opposed to one value being N/A, which each check says)."""
    host = facts.host
    return "host" in host.unavailable and all(
        value is None for value in (host.cpu_count, host.ram_available_bytes, host.shm_total_bytes,
                                    host.runs_dir_free_bytes))


def _as_list(result: Finding | Iterable[Finding] | None) -> list[Finding]:
    if result is None:
        return []
    if isinstance(result, Finding):
        return [result]
    return list(result)


def run_checks(facts: Facts, profile: Profile | None, *, only: Iterable[str] = (), skip: Iterable[str] = (),
               gpus: Iterable[int] | None = None, estimate: Any = None, alloc_env_name: str | None = None,
               torch_version: str | None = None, profile_label: str | None = None,
               catalogue: Sequence[Check] = CATALOGUE) -> list[Finding]:
    """Run the selected checks over one facts snapshot. Never raises for a check's own bug."""
    profile = profile if profile is not None else EMPTY
    indexes = tuple(gpus) if gpus else None
    if indexes and facts.gpus:
        known = sorted(g.index for g in facts.gpus)
        missing = [i for i in indexes if i not in known]
        if missing:
            raise UsageError(f"--gpus: no GPU {', '.join(map(str, missing))} here (GPUs: {', '.join(map(str, known))})")
    ctx = CheckContext(gpus=indexes, estimate=estimate, alloc_env_name=alloc_env_name,
                       torch_version=torch_version, profile_label=profile_label)
    findings: list[Finding] = []
    for check in select(only, skip, catalogue=catalogue):
        skipped = _skip_reason(check, facts, profile)
        if skipped is not None:
            findings.append(skipped)
            continue
        try:
            produced = _as_list(check.func(facts, profile, ctx))
        except Exception as exc:  # one broken check must not hide the others
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            findings.append(Finding(
                check.id, Severity.ERROR, f"{check.title}: the check crashed",
                f"{type(exc).__name__}: {exc} (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})",
                f"gpudoc check --skip {check.id}  # and report this gpudoc bug with the line above",
            ))
            continue
        findings.extend(produced or [Finding(check.id, Severity.OK, check.title)])
    return findings
