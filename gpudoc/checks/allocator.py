"""The CUDA caching allocator variable: the name the installed torch reads, valid options and values.

torch >= 2.9 reads ``PYTORCH_ALLOC_CONF`` (and still ``PYTORCH_CUDA_ALLOC_CONF``, deprecated, when the
new one is unset); older torch reads only ``PYTORCH_CUDA_ALLOC_CONF``. An unknown option or a bad
value makes torch raise at the job's first CUDA allocation (minutes into a launch, after the model
loaded), which is why a typo is a ``fail`` here.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpudoc.allocator import CUDA_NAME as ALLOC_OLD
from gpudoc.allocator import NEW_NAME as ALLOC_NEW
from gpudoc.allocator import Option, parse, with_expandable
from gpudoc.checks._common import CheckContext, effective_env, env_origin, profile_name
from gpudoc.facts.model import Facts
from gpudoc.findings import Finding, Severity
from gpudoc.profiles.model import Profile

ALLOC_CONF = "env.alloc-conf"

_BOOL = ("True", "False")


def _bool(value: str) -> str | None:
    return None if value in _BOOL else "expects True or False (capitalised)"


def _int_min(minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not re.fullmatch(r"\d+", value):
            return "expects a whole number"
        if int(value) <= minimum:
            return f"must be greater than {minimum}"
        return None

    return check


def _fraction(value: str) -> str | None:
    try:
        number = float(value)
    except ValueError:
        return "expects a number between 0 and 1"
    return None if 0.0 < number < 1.0 else "must be strictly between 0.0 and 1.0"


def _power_of_two(limit: int | None = None) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not re.fullmatch(r"\d+", value):
            return "expects a power of two"
        n = int(value)
        if n & (n - 1) or n == 0:
            return "must be a power of two"
        if limit is not None and n > limit:
            return f"must be at most {limit}"
        return None

    return check


def _roundup(value: str) -> str | None:
    if value.startswith("["):
        if not value.endswith("]"):
            return "list is not closed with ]"
        for item in filter(None, (i.strip() for i in value[1:-1].split(","))):
            size, _, div = item.partition(":")
            if not div or not (size == ">" or size.isdigit()) or (_power_of_two()(div) is not None and div != "0"):
                return f"bad list entry '{item}' (expects SIZE_MB:DIVISIONS or >:DIVISIONS)"
        return None
    return _power_of_two()(value)


def _backend(value: str) -> str | None:
    return None if value in ("native", "cudaMallocAsync") else "expects native or cudaMallocAsync"


# Every option the CUDA caching allocator accepts (up to torch 2.13), with its value check.
OPTIONS = {
    "backend": _backend,
    "expandable_segments": _bool,
    "max_split_size_mb": _int_min(20),
    "max_non_split_rounding_mb": _int_min(0),
    "garbage_collection_threshold": _fraction,
    "roundup_power2_divisions": _roundup,
    "release_lock_on_cudamalloc": _bool,
    "pinned_use_cuda_host_register": _bool,
    "pinned_use_hip_host_register": _bool,
    "pinned_num_register_threads": _power_of_two(128),
    "pinned_use_background_threads": _bool,
    "pinned_reserve_segment_size_mb": _int_min(0),
    "per_process_memory_fraction": _fraction,
    "graph_capture_record_stream_reuse": _bool,
}


def torch_reads(facts: Facts, ctx: CheckContext) -> tuple[str | None, str]:
    """(variable name the job's torch reads, how we know)."""
    if facts.torch is not None and facts.torch.ok and facts.torch.alloc_env_name:
        return facts.torch.alloc_env_name, f"torch {facts.torch.torch_version} (--deep probe)"
    if ctx.alloc_env_name:
        return ctx.alloc_env_name, f"torch {ctx.torch_version}" if ctx.torch_version else "the installed torch"
    return None, "torch not found"


def _fixed(options: list[Option]) -> str:
    """The settings with the valid options kept and expandable segments on."""
    valid = ",".join(f"{o.key}:{o.value}" for o in options if o.key in OPTIONS and OPTIONS[o.key](o.value) is None)
    return with_expandable(valid)


def _set(name: str, value: str, profile: Profile, ctx: CheckContext, origin_name: str) -> str:
    if env_origin(origin_name, profile) == "profile":
        return f'{origin_name} = "{value}" in [env] of {profile_name(profile, ctx)}'
    return f"export {name}={value}"


def check_alloc_conf(facts: Facts, profile: Profile, ctx: CheckContext) -> list[Finding]:
    env = effective_env(facts, profile)
    reads, how = torch_reads(facts, ctx)
    new, old = env.get(ALLOC_NEW), env.get(ALLOC_OLD)
    out: list[Finding] = []
    target = reads or ALLOC_OLD
    # gpudoc run writes a profile's allocator value under the name torch reads; only the shell's
    # own variables can be under the wrong name.
    from_profile = {n for n in (ALLOC_NEW, ALLOC_OLD) if env_origin(n, profile) == "profile"}

    if new is not None and old is not None and new != old:
        winner = ALLOC_NEW if reads == ALLOC_NEW else ALLOC_OLD if reads else None
        loser = ALLOC_OLD if winner == ALLOC_NEW else ALLOC_NEW
        detail = f"{ALLOC_NEW}={new!r}, {ALLOC_OLD}={old!r}"
        detail += f"; {how} reads {winner}, {loser} is ignored" if winner else ""
        out.append(Finding(
            ALLOC_CONF, Severity.WARN, f"{ALLOC_NEW} and {ALLOC_OLD} are both set and disagree", detail,
            f"unset {loser or ALLOC_OLD}" if (loser or ALLOC_OLD) not in from_profile
            else f"remove {loser or ALLOC_OLD} from [env] of {profile_name(profile, ctx)}",
            (ALLOC_NEW, ALLOC_OLD),
        ))
    if reads == ALLOC_OLD and new is not None and old is None and ALLOC_NEW not in from_profile:
        out.append(Finding(
            ALLOC_CONF, Severity.WARN, f"{ALLOC_NEW} is set, but {how} reads only {ALLOC_OLD}",
            f"{ALLOC_NEW}={new!r} has no effect: the allocator runs with its defaults",
            f"export {ALLOC_OLD}={new}", (ALLOC_NEW,),
        ))
    if reads == ALLOC_NEW and old is not None and new is None and ALLOC_OLD not in from_profile:
        out.append(Finding(
            ALLOC_CONF, Severity.INFO, f"{ALLOC_OLD} is deprecated for {how}",
            f"it still works while {ALLOC_NEW} is unset; torch warns about the old name",
            f"export {ALLOC_NEW}={old}; unset {ALLOC_OLD}", (ALLOC_OLD,),
        ))

    # The value the job's torch will use.
    if reads == ALLOC_NEW:
        name, value = (ALLOC_NEW, new) if new is not None else (ALLOC_OLD, old)
    elif reads == ALLOC_OLD:
        name, value = (ALLOC_OLD, old) if old is not None or ALLOC_NEW not in from_profile else (ALLOC_NEW, new)
    else:
        name, value = (ALLOC_NEW, new) if new is not None else (ALLOC_OLD, old)
    if value is None:
        out.append(Finding(
            ALLOC_CONF, Severity.INFO, "allocator variable unset: expandable_segments is off",
            "expandable segments cut fragmentation (\"reserved but unallocated\" memory) at no cost for training",
            f"export {target}=expandable_segments:True", (target,),
        ))
        return out

    options, problems = parse(value)
    bad = False
    for problem in problems:
        bad = True
        out.append(Finding(ALLOC_CONF, Severity.FAIL, f"{name}: {problem}", f"{name}={value!r}",
                           _set(target, _fixed(options), profile, ctx, name), (name,)))
    for opt in options:
        check = OPTIONS.get(opt.key)
        if check is None:
            bad = True
            import difflib  # only on a mistake

            close = difflib.get_close_matches(opt.key, OPTIONS, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            out.append(Finding(
                ALLOC_CONF, Severity.FAIL, f"{name}: unknown option '{opt.key}'{hint}",
                f"{name}={value!r}; torch raises \"Unrecognized CachingAllocator option\" at the first CUDA allocation",
                _set(target, _fixed([Option(close[0], o.value) if close and o.key == opt.key else o for o in options]),
                     profile, ctx, name),
                (name,),
            ))
            continue
        error = check(opt.value)
        if error:
            bad = True
            out.append(Finding(
                ALLOC_CONF, Severity.FAIL, f"{name}: {opt.key}:{opt.value} — {error}",
                f"{name}={value!r}; torch rejects it at the first CUDA allocation",
                _set(target, _fixed(options), profile, ctx, name), (name,),
            ))
    keys = {o.key: o.value for o in options}
    backend = keys.get("backend", "native")
    if backend == "cudaMallocAsync" and keys.get("expandable_segments") == "True":
        out.append(Finding(
            ALLOC_CONF, Severity.WARN, f"{name}: expandable_segments has no effect with backend:cudaMallocAsync",
            "expandable segments belong to the native caching allocator", _set(target, "expandable_segments:True", profile, ctx, name),
            (name,),
        ))
    elif not bad and backend == "native" and keys.get("expandable_segments") != "True":
        state = "disabled" if keys.get("expandable_segments") == "False" else "not set"
        out.append(Finding(
            ALLOC_CONF, Severity.INFO, f"{name}: expandable_segments {state}",
            f"{name}={value!r}; expandable segments cut fragmentation at no cost for training",
            _set(target, _fixed(options), profile, ctx, name), (name,),
        ))
    if bad:
        # The FAIL's remedy already writes the corrected value under the right name.
        out = [f for f in out if not (f.severity is Severity.INFO and "deprecated" in f.title)]
    if not out or all(f.severity is Severity.OK for f in out):
        out.append(Finding(ALLOC_CONF, Severity.OK, f"{name}={value}",
                           f"{how} reads {reads}" if reads else "torch version unknown: both names checked"))
    return out
