"""What several checks need: the job's GPUs, its process count, the environment it will get.

Everything here is pure: it reads a :class:`Facts` snapshot and a profile, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from gpudoc.errors import UsageError
from gpudoc.facts.model import Facts, Gpu
from gpudoc.profiles.model import EMPTY, Profile

if TYPE_CHECKING:
    from typing_extensions import TypeGuard

# The two spellings of the allocator variable (torch >= 2.9 reads the first, older the second).


@dataclass(frozen=True)
class CheckContext:
    """Inputs of a check run that are not facts: the user's choices and slow-to-get extras.

    ``gpus`` is ``--gpus`` (None: the job's GPUs follow CUDA_VISIBLE_DEVICES and the profile);
    ``estimate`` has ``.peak_bytes`` and ``.source``; ``alloc_env_name`` is the allocator
    variable the installed torch reads when no ``--deep`` probe ran. (Which earlier gpudoc run
    owns a process is a fact: ``ProcessInfo.gpudoc_run_id``.)
    """

    gpus: tuple[int, ...] | None = None
    estimate: Any = None
    alloc_env_name: str | None = None
    torch_version: str | None = None  # the installed torch's version (package metadata, no import)
    profile_label: str | None = None  # how to name the profile in remedies (`-p NAME`)


def has_profile(profile: Profile | None) -> TypeGuard[Profile]:
    if profile is None or profile is EMPTY:
        return False
    if profile.path is not None:
        return True
    return any((profile.gpu, profile.env, profile.train, profile.launch, profile.model))


def procs_per_node(profile: Profile | None) -> int | None:
    """GPUs (= processes) the job uses on this node; None without a profile that says."""
    if not has_profile(profile):
        return None
    value = profile.launch.get("nproc_per_node") or profile.gpu.get("count")
    return int(value) if value else None


def is_multi_process(profile: Profile | None) -> bool:
    return has_profile(profile) and profile.world_size > 1


def profile_name(profile: Profile | None, ctx: CheckContext | None = None) -> str:
    if ctx is not None and ctx.profile_label:
        return ctx.profile_label
    if profile is None or not has_profile(profile):
        return "PROFILE"
    return str(profile.path) if profile.path is not None and profile.name == "gpudoc.toml" else profile.name


def effective_env(facts: Facts, profile: Profile | None) -> dict[str, str]:
    """The environment the job will see under ``gpudoc run``: the shell's, then the profile's [env]."""
    env = dict(facts.env or {})
    if has_profile(profile):
        env.update({k: str(v) for k, v in profile.env.items()})
    return env


def env_origin(name: str, profile: Profile | None) -> str:
    return "profile" if has_profile(profile) and name in profile.env else "environment"


def set_remedy(name: str, value: str, profile: Profile | None, ctx: CheckContext | None = None) -> str:
    """The exact way to set a variable: in the profile's [env] when it came from there, else export."""
    if env_origin(name, profile) == "profile":
        return f'{name} = "{value}" in [env] of {profile_name(profile, ctx)}'
    return f"export {name}={value}"


def unset_remedy(name: str, profile: Profile | None, ctx: CheckContext | None = None) -> str:
    if env_origin(name, profile) == "profile":
        return f"remove {name} from [env] of {profile_name(profile, ctx)}"
    return f"unset {name}"


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off", "n", "f")


# --- GPU selection -------------------------------------------------------------------------------

_RANGE = re.compile(r"^(\d+)-(\d+)$")


# No machine has more GPUs than this: a larger index or range is a typo (and would cost memory).
MAX_GPU_INDEX = 1023


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """``"0,2"`` / ``"0-3"`` / ``"all"`` -> indexes (``all`` -> empty tuple = every GPU)."""
    text = text.strip()
    if not text:
        raise UsageError("--gpus: empty (use e.g. 0,1 or 0-3 or all)")
    if text.lower() == "all":
        return ()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = _RANGE.match(part)
        if match:
            lo, hi = int(match.group(1)), int(match.group(2))
            if lo > hi:
                raise UsageError(f"--gpus: bad range '{part}' (low > high)")
            if hi > MAX_GPU_INDEX:
                raise UsageError(f"--gpus: '{part}' goes past GPU {MAX_GPU_INDEX}")
            out.extend(range(lo, hi + 1))
        elif part.isdigit():
            if int(part) > MAX_GPU_INDEX:
                raise UsageError(f"--gpus: '{part}' is past GPU {MAX_GPU_INDEX}")
            out.append(int(part))
        else:
            raise UsageError(f"--gpus: '{part}' is not a GPU index (use e.g. 0,1 or 0-3 or all)")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Visibility:
    """How CUDA_VISIBLE_DEVICES maps onto the GPUs in the snapshot."""

    raw: str | None  # None: unset
    gpus: tuple[Gpu, ...]  # in CUDA order
    mig_entries: tuple[str, ...] = ()  # MIG-... entries that matched (each one CUDA device)
    problems: tuple[str, ...] = ()
    hidden_all: bool = False
    duplicates: tuple[str, ...] = ()
    count: int = 0  # CUDA devices the job will see
    notes: tuple[str, ...] = field(default_factory=tuple)


def _mig_uuids(gpu: Gpu) -> list[str]:
    devices = (gpu.mig or {}).get("devices") or []
    return [str(d["uuid"]) for d in devices if isinstance(d, Mapping) and d.get("uuid")]


def visibility(facts: Facts, env: Mapping[str, str]) -> Visibility:
    """Apply CUDA's rules: entries are indexes, GPU UUIDs (unique prefixes allowed) or MIG UUIDs;
    the first invalid entry hides itself and everything after it."""
    gpus = tuple(sorted(facts.gpus, key=lambda g: g.index))
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return Visibility(raw=None, gpus=gpus, count=len(gpus))
    entries = [e.strip() for e in raw.split(",")] if raw.strip() else []
    if not entries or entries[0] in ("-1", "NoDevFiles", "none", "void"):
        return Visibility(raw=raw, gpus=(), hidden_all=True, count=0)
    chosen: list[Gpu] = []
    migs: list[str] = []
    problems: list[str] = []
    seen: list[str] = []
    dups: list[str] = []
    for position, entry in enumerate(entries):
        match: Gpu | None = None
        mig_hit: str | None = None
        if re.fullmatch(r"\d+", entry):
            match = next((g for g in gpus if g.index == int(entry)), None)
        elif entry.upper().startswith("MIG-"):
            for g in gpus:
                for uuid in _mig_uuids(g):
                    if uuid == entry or uuid.startswith(entry):
                        match, mig_hit = g, uuid
                if mig_hit:
                    break
            if mig_hit is None and not any(_mig_uuids(g) for g in gpus):
                # The snapshot does not list MIG UUIDs: trust the entry rather than flag it.
                migs.append(entry)
                seen.append(entry)
                continue
        elif entry.upper().startswith("GPU-"):
            hits = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
            match = hits[0] if len(hits) == 1 else None
        if match is None:
            rest = entries[position:]
            problems.append(
                f"entry '{entry}' matches no GPU: CUDA ignores it"
                + (f" and the {len(rest) - 1} entries after it" if len(rest) > 1 else "")
            )
            break
        key = mig_hit or str(match.index)
        if key in seen:
            dups.append(entry)
            continue
        seen.append(key)
        if mig_hit:
            migs.append(mig_hit)
        chosen.append(match)
    count = len(seen)
    return Visibility(
        raw=raw,
        gpus=tuple({g.index: g for g in chosen}.values()),
        mig_entries=tuple(migs),
        problems=tuple(problems),
        hidden_all=count == 0,
        duplicates=tuple(dups),
        count=count,
    )


def target_gpus(facts: Facts, profile: Profile | None, ctx: CheckContext) -> tuple[Gpu, ...]:
    """The GPUs the job will use: ``--gpus`` when given; else the visible ones, and of those the
    first ``nproc_per_node`` (torchrun gives rank r ``cuda:r``)."""
    if ctx.gpus:
        wanted = set(ctx.gpus)
        return tuple(g for g in sorted(facts.gpus, key=lambda g: g.index) if g.index in wanted)
    vis = visibility(facts, effective_env(facts, profile))
    chosen = vis.gpus
    need = procs_per_node(profile)
    if need and len(chosen) > need:
        chosen = chosen[:need]
    return chosen


def free_bytes(gpu: Gpu) -> int | None:
    if gpu.memory_free_bytes is not None:
        return gpu.memory_free_bytes
    if gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None:
        return max(gpu.memory_total_bytes - gpu.memory_used_bytes, 0)
    return None


def mig_enabled(gpu: Gpu) -> bool:
    return bool(gpu.mig and gpu.mig.get("enabled"))


def gpu_list(indexes: Iterable[int]) -> str:
    return ",".join(str(i) for i in indexes)
