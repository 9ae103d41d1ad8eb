"""What the launcher says about the job: how many processes on how many nodes, which job, which node.

Read only from the launcher's own options (``gpudoc.job.argv``) and the engine's environment, never
from the script's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoc.job.argv import JobCommand

if TYPE_CHECKING:
    from gpudoc.profiles.model import Profile

_UNSET_IDS = ("", "none", "default")


@dataclass(frozen=True)
class World:
    """Processes per node, nodes and world size, each None when the command does not say exactly
    (``--nproc_per_node=gpu``, an elastic ``--nnodes=1:4``, a hostfile)."""

    nproc_per_node: int | None = None
    nnodes: int | None = None

    @property
    def world_size(self) -> int | None:
        if self.nproc_per_node is None or self.nnodes is None:
            return None
        return self.nproc_per_node * self.nnodes

    def as_launch(self) -> dict[str, int]:
        """What a profile's ``[launch]`` would say: only the counts the launcher fixes."""
        return {k: v for k, v in (("nproc_per_node", self.nproc_per_node), ("nnodes", self.nnodes)) if v is not None}


def _exact(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # "auto", "gpu", "1:4" (elastic) say nothing exact


def _at_most(value: str | None) -> int | None:
    """The largest count a value allows: "4" -> 4, elastic "1:4" -> 4; "gpu"/"auto" -> None."""
    if value is None:
        return None
    try:
        return max(int(part) for part in value.split(":"))
    except ValueError:
        return None


def world(command: JobCommand, environ: Mapping[str, str] | None = None) -> World:
    """What the launcher's own options say, exactly; with the job's ``environ``, also torchrun's
    ``--nproc_per_node=gpu`` (one process per GPU its CUDA_VISIBLE_DEVICES shows)."""
    o = command.options
    if command.launcher in ("torchrun", "tune"):
        nproc = _exact(o.get("--nproc_per_node"))
        if nproc is None and o.get("--nproc_per_node") == "gpu" and environ is not None:
            indices, uuids = visible_selection(environ)
            nproc = len(indices or uuids or ()) or None
        if o.has("--nnodes"):
            return World(nproc, _exact(o.get("--nnodes")))
        if command.wrapper is not None:
            return _wrapped(command, World(nproc, None), environ)
        return World(nproc, 1 if nproc is not None else None)
    if command.launcher == "deepspeed":
        nproc = _exact(o.get("--num_gpus"))
        nnodes = _exact(o.get("--num_nodes"))
        if nproc is not None and nnodes is None and not o.has("--hostfile"):
            nnodes = 1
        return World(nproc, nnodes)
    if command.launcher == "accelerate":
        total = _exact(o.get("--num_processes"))
        nnodes = _exact(o.get("--num_machines")) or (1 if total is not None else None)
        return World(total // nnodes if total is not None and nnodes else None, nnodes)
    return _wrapped(command, World(), environ)


# srun's input variables, one per option (its man page): inside sbatch or salloc they hold the
# allocation's counts, which srun takes for each option its command line does not give.
_SLURM_ENV = (("-N", "SLURM_NNODES"), ("-n", "SLURM_NTASKS"), ("--ntasks-per-node", "SLURM_NTASKS_PER_NODE"))


def _wrapped(command: JobCommand, inner: World, environ: Mapping[str, str] | None = None) -> World:
    """srun/mpirun in front: their node and task counts, where the launcher itself says nothing;
    srun takes each one its options leave out from ``environ`` (``SLURM_NNODES``, ``SLURM_NTASKS``)."""
    if command.wrapper is None:
        return inner
    w = command.wrapper_options
    if command.wrapper == "srun":
        said = {"-N": w.get("-N", "--nodes"), "-n": w.get("-n", "--ntasks"),
                "--ntasks-per-node": w.get("--ntasks-per-node")}
        for option, variable in _SLURM_ENV:
            if said[option] is None and environ is not None:
                said[option] = environ.get(variable)
        nodes, tasks, per_node = _exact(said["-N"]), _exact(said["-n"]), _exact(said["--ntasks-per-node"])
    else:  # mpirun / mpiexec
        nodes = None
        tasks = _exact(w.get("-np", "-n", "--np"))
        per_node = _exact(w.get("--npernode", "-npernode", "--N"))
    if command.launcher is not None:
        # One launcher per node: it starts the workers; the wrapper says how many nodes.
        return World(inner.nproc_per_node, inner.nnodes if inner.nnodes is not None else nodes)
    if per_node is None and tasks is not None and nodes:
        per_node = tasks // nodes if tasks % nodes == 0 else None
    if nodes is None and tasks is not None and per_node:
        nodes = tasks // per_node
    if per_node is None and tasks is not None and nodes is None:
        per_node, nodes = tasks, 1
    return World(per_node, nodes)


def process_count(command: JobCommand, profile: Profile | None = None) -> int | None:
    """How many worker processes the job starts across all nodes, at most, when that can be told
    (the fail-fast question: can one rank be left waiting for another?)."""
    exact = world(command).world_size
    if exact is not None:
        return exact
    o = command.options
    counts = [n for n in (_at_most(o.get(name)) for name in ("--nproc_per_node", "--num_gpus", "--num_processes"))
              if n is not None]
    nodes = [n for n in (_at_most(o.get(name)) for name in ("--nnodes", "--num_nodes", "--num_machines"))
             if n is not None]
    if counts or nodes:
        return max(counts or [1]) * max(nodes or [1])
    if profile is not None and profile.world_size > 1 and (profile.launch or profile.gpu.get("count")):
        return int(profile.world_size)
    return None


def is_multi_process(command: JobCommand, profile: Profile | None = None) -> bool:
    """True when one rank failing leaves others waiting in a collective (fail-fast applies)."""
    count = process_count(command, profile)
    if count is not None:
        return count > 1
    # torchrun --nproc_per_node=auto|gpu, deepspeed/accelerate without a count, srun/mpirun: several.
    return command.options.has("--nproc_per_node") or command.launcher in ("deepspeed", "accelerate") or (
        command.wrapper is not None)


def visible_selection(environ: Mapping[str, str]) -> tuple[set[int] | None, set[str] | None]:
    """GPUs the job can use, from its CUDA_VISIBLE_DEVICES: (indices, uuids); None = all."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip() == "":
        return None, None
    indices, uuids = set(), set()
    for item in value.split(","):
        item = item.strip()
        if item.isdigit():
            indices.add(int(item))
        elif item.startswith(("GPU-", "MIG-")):
            uuids.add(item)
        else:
            break  # CUDA stops at the first invalid entry
    return (indices or None), (uuids or None)


@dataclass(frozen=True)
class JobIdentity:
    """Which multi-node job a run belongs to, and which node of it this is, from the engine."""

    job_id: str | None
    source: str | None  # "slurm", "rdzv-id", "torchelastic"
    node_rank: int | None = None


def job_identity(command: JobCommand, environ: Mapping[str, str]) -> JobIdentity:
    """The engine's id for the job (Slurm's job and step, torchrun's ``--rdzv-id``, torchelastic's
    run id) and this node's rank in it."""
    rank = node_rank(command, environ)
    slurm = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if slurm:
        step = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID")
        return JobIdentity(f"slurm-{slurm}" + (f".{step}" if step not in (None, "") else ""), "slurm", rank)
    rdzv = command.options.get("--rdzv_id") if command.launcher == "torchrun" else None
    if rdzv is not None and rdzv.lower() not in _UNSET_IDS:
        return JobIdentity(f"rdzv-{rdzv}", "rdzv-id", rank)
    elastic = environ.get("TORCHELASTIC_RUN_ID")
    if elastic and elastic.lower() not in _UNSET_IDS:
        return JobIdentity(f"rdzv-{elastic}", "torchelastic", rank)
    return JobIdentity(None, None, rank)


def node_rank(command: JobCommand, environ: Mapping[str, str]) -> int | None:
    """Which node of the job this is, for telling one job's records apart (they may share a host).

    Slurm's node id (or a group rank already in the environment) first; then torchrun's
    ``--node-rank``, but only with the static rendezvous: c10d hands out group ranks by arrival
    and ignores the flag; then ``NODE_RANK`` (PyTorch Lightning, accelerate).
    """
    candidates = [environ.get("SLURM_NODEID"), environ.get("GROUP_RANK")]
    if command.launcher == "torchrun" and command.options.get("--rdzv_backend") in (None, "static"):
        candidates.append(command.options.get("--node_rank"))
    candidates.append(environ.get("NODE_RANK"))
    for value in candidates:
        try:
            return int(str(value).strip())
        except (TypeError, ValueError):
            continue
    return None
