"""The caching allocator's vocabulary, once: its variable names, which one a torch reads, and its
``key:value,...`` settings.

torch 2.9 moved the settings to the device-agnostic ``PYTORCH_ALLOC_CONF``; ``PYTORCH_CUDA_ALLOC_CONF``
still works there (deprecated) and is the only name older releases read; ROCm builds read
``PYTORCH_HIP_ALLOC_CONF``. torch parses the value strictly: ``expandable_segments:true`` is an
error, only ``True``/``False`` are accepted, and spaces become part of a name or value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

NEW_NAME = "PYTORCH_ALLOC_CONF"
CUDA_NAME = "PYTORCH_CUDA_ALLOC_CONF"
HIP_NAME = "PYTORCH_HIP_ALLOC_CONF"
# The names a CUDA build of torch reads, the one it prefers first.
CUDA_NAMES = (NEW_NAME, CUDA_NAME)
NAMES = (NEW_NAME, CUDA_NAME, HIP_NAME)
NEW_NAME_SINCE = (2, 9)
EXPANDABLE = "expandable_segments"


def name_for(torch_version: tuple[int, ...] | None) -> str:
    """The variable a torch of this version reads (the old name when the version is unknown: every
    CUDA release reads it)."""
    return NEW_NAME if torch_version is not None and torch_version >= NEW_NAME_SINCE else CUDA_NAME


@dataclass(frozen=True)
class Option:
    key: str
    value: str


def parse(conf: str) -> tuple[list[Option], list[str]]:
    """Split ``key:value,key:[a:b,c:d]`` like torch's tokenizer (commas inside brackets stay);
    also the problems torch would trip on (no value, spaces)."""
    options: list[Option] = []
    problems: list[str] = []
    parts, depth, current = [], 0, ""
    for ch in conf:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    for part in parts:
        if not part.strip():
            continue
        key, sep, value = part.partition(":")
        if not sep:
            problems.append(f"'{part}' has no ':value'")
            continue
        if key != key.strip() or value != value.strip():
            problems.append(f"'{part}' contains spaces: torch reads them as part of the name or value")
        options.append(Option(key.strip(), value.strip()))
    return options, problems


def is_expandable(conf: str | None) -> bool:
    """Whether these settings turn expandable segments on (as torch reads them: ``True`` only)."""
    if not conf:
        return False
    options, _ = parse(conf)
    values = [o.value for o in options if o.key == EXPANDABLE]
    return bool(values) and values[-1] == "True"


def with_expandable(conf: str | None, *, keep: frozenset[str] | None = None) -> str:
    """These settings with ``expandable_segments:True`` (last, replacing any earlier value);
    ``keep``: only these option keys survive (e.g. the valid ones)."""
    options, _ = parse(conf or "")
    kept = [o for o in options if o.key != EXPANDABLE and (keep is None or o.key in keep)]
    return ",".join([*(f"{o.key}:{o.value}" for o in kept), f"{EXPANDABLE}:True"])


def effective(env: Mapping[str, str], reads: str | None = None) -> str | None:
    """The settings a CUDA torch applies from ``env``: the name it reads (``reads``) first, else
    either name (new first), else None."""
    for name in ((reads,) if reads else ()) + CUDA_NAMES:
        if env.get(name):
            return env[name]
    return None


def written_under(env: Mapping[str, str], name: str | None) -> dict[str, str]:
    """``env`` with the allocator settings under the one name the job's torch reads (the value
    given under that name wins when both are set); unchanged when the name is not known."""
    out = dict(env)
    if name not in CUDA_NAMES:
        return out
    values = [out.pop(n) for n in CUDA_NAMES if n in out]
    if values:
        own = env.get(name)
        out[name] = own if own is not None else values[0]
    return out
