"""The job's resolved command line and environment: pure functions of the profile and the plan.

Nothing here starts, reads or writes anything, so ``--dry-run`` shows exactly what ``run`` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

# Both names of the caching allocator's settings; torch >= 2.9 reads the first (the second is its
# deprecated alias), older releases read only the second.
ALLOC_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

# Launchers whose flags say how many processes they start (flag -> meaning).
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_NPROC_FLAGS = ("--nproc_per_node", "--nproc-per-node")
_NNODES_FLAGS = ("--nnodes",)
_OTHER_NPROC_FLAGS = ("--num_gpus", "--num-gpus", "--num_processes", "--num-processes",
                      "--num_nodes", "--num-nodes", "--ntasks", "-np")
_RDZV_ID_FLAGS = ("--rdzv_id", "--rdzv-id")


@dataclass(frozen=True)
class ResolvedCommand:
    """What ``gpudoc run`` launches: argv, the variables it sets, the config edits it makes."""

    argv: list[str]
    env_set: dict[str, str]
    file_edits: tuple = ()  # bind.FileEdit objects, applied just before launch
    conflicts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    plan: Any = field(default=None, compare=False, repr=False)  # the bind plan, to apply its edits

    def child_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        env.update(self.env_set)
        return env

    def to_dict(self) -> dict:
        """The SPEC's ``--dry-run --json`` document."""
        return {
            "command": list(self.argv),
            "env_set": dict(self.env_set),
            "file_edits": [{"path": str(getattr(e, "path", "")), "diff": getattr(e, "diff", "")}
                           for e in self.file_edits],
        }


def resolve(profile: Any, command: Sequence[str], *, alloc_name: str | None = None,
            plan: Any = None) -> ResolvedCommand:
    """The profile's ``[env]``, then the bind plan (``GPUDOC_<KNOB>``, placeholders, flags, files).

    ``alloc_name`` is the allocator variable the job's torch reads; a profile that sets either
    name gets its value written under that one (None: keep the profile's own spelling).
    """
    env: dict[str, str] = {str(k): _env_value(v) for k, v in dict(getattr(profile, "env", {}) or {}).items()}
    argv = list(command)
    edits: tuple = ()
    conflicts: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    if plan is not None:
        argv = list(plan.argv)
        env.update({str(k): _env_value(v) for k, v in plan.env.items()})
        edits = tuple(plan.file_edits)
        conflicts = tuple(plan.conflicts)
        notes = tuple(getattr(plan, "notes", ()) or ())
    env = normalise_alloc_env(env, alloc_name)
    return ResolvedCommand(argv=argv, env_set=env, file_edits=edits, conflicts=conflicts, notes=notes,
                           plan=plan)


def normalise_alloc_env(env: Mapping[str, str], alloc_name: str | None) -> dict[str, str]:
    """Write allocator settings under the name the installed torch reads (and only there)."""
    out = dict(env)
    if alloc_name is None or alloc_name not in ALLOC_NAMES:
        return out
    values = [out.pop(name) for name in ALLOC_NAMES if name in out]
    if values:
        # The right name wins when the profile spells both; otherwise the one given.
        own = env.get(alloc_name)
        out[alloc_name] = own if own is not None else values[0]
    return out


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _flag_values(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """Values of ``--flag V`` / ``--flag=V`` in argv (every occurrence)."""
    found = []
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                found.append(argv[i + 1])
            elif arg.startswith(name + "="):
                found.append(arg[len(name) + 1:])
    return found


def is_torchrun(argv: Sequence[str]) -> bool:
    if not argv:
        return False
    if os.path.basename(argv[0]) == "torchrun":
        return True
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in _TORCHRUN_MODULES:
            return True
    return False


def _max_count(value: str) -> int | None:
    # "4", "1:2" (elastic min:max nnodes); "auto"/"gpu" are unknowable here.
    try:
        return max(int(part) for part in value.split(":"))
    except ValueError:
        return None


def launcher_args(argv: Sequence[str]) -> list[str]:
    """The launcher's own flags: everything before the training script (flags after it belong
    to the script, which may well have a ``--nnodes`` of its own)."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg.endswith(".py") or arg == "--":
            return list(argv[:i])
    return list(argv)


def process_count(argv: Sequence[str], profile: Any = None) -> int | None:
    """How many worker processes the command starts across all nodes, when that can be told."""
    head = launcher_args(argv)
    counts = []
    for names in (_NPROC_FLAGS, _OTHER_NPROC_FLAGS):
        for value in _flag_values(head, names):
            n = _max_count(value)
            if n is not None:
                counts.append(n)
    nnodes = [n for n in (_max_count(v) for v in _flag_values(head, _NNODES_FLAGS)) if n]
    if counts or nnodes:
        return max(counts or [1]) * max(nnodes or [1])
    if profile is not None:
        try:
            size = int(profile.world_size)
        except (AttributeError, TypeError, ValueError):
            size = 0
        if size > 1 and (profile.launch or profile.gpu.get("count")):
            return size
    return None


def is_multi_process(argv: Sequence[str], profile: Any = None) -> bool:
    """True when one rank failing leaves others waiting in a collective (fail-fast applies)."""
    n = process_count(argv, profile)
    if n is not None:
        return n > 1
    head = launcher_args(argv)
    # torchrun --nproc_per_node=auto|gpu, deepspeed/accelerate without a count: several ranks.
    return bool(_flag_values(head, _NPROC_FLAGS)) or os.path.basename(argv[0] if argv else "") in (
        "deepspeed", "accelerate", "mpirun", "srun")


def rendezvous_id(argv: Sequence[str]) -> str | None:
    values = _flag_values(launcher_args(argv), _RDZV_ID_FLAGS)
    return values[-1] if values else None


@dataclass(frozen=True)
class JobIdentity:
    """Which multi-node job this run belongs to, from the engine that started it."""

    job_id: str | None
    source: str | None  # "slurm", "torchelastic", "rdzv-id"
    node_rank: str | None = None
    extra: dict = field(default_factory=dict)


def job_identity(argv: Sequence[str], environ: Mapping[str, str]) -> JobIdentity:
    """The engine's id for the job: Slurm's job (and step), torchelastic's run id, ``--rdzv-id``."""
    slurm = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    node = environ.get("SLURM_NODEID") or environ.get("GROUP_RANK")
    if slurm:
        step = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID")
        job = f"slurm-{slurm}" + (f".{step}" if step not in (None, "") else "")
        return JobIdentity(job, "slurm", node)
    rdzv = rendezvous_id(argv)
    if rdzv and rdzv not in ("none", "default"):
        return JobIdentity(f"rdzv-{rdzv}", "rdzv-id", node)
    run_id = environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id not in ("none", "default"):
        return JobIdentity(f"rdzv-{run_id}", "torchelastic", node)
    return JobIdentity(None, None, node)
