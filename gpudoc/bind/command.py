"""Where the training script's own arguments start inside a launcher command.

``torchrun --nproc_per_node 4 train.py --per_device_train_batch_size 8``: presets may touch only
what follows ``train.py``; torchrun's options belong to torchrun (and are read, never changed, for
the consistency checks).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

# Options of each launcher that take no value; every other ``--option`` without ``=`` consumes
# the next token.
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                   "--run_path", "--use-env", "--use_env"}
_ACCELERATE_FLAGS = {"--cpu", "--multi_gpu", "--tpu", "--use_deepspeed", "--use_fsdp", "--use_xpu",
                     "--use_megatron_lm", "-m", "--module", "--no_python", "--debug", "-q", "--quiet",
                     "--same_network", "--tpu_use_cluster", "--tpu_use_sudo", "--downcast_bf16",
                     "--enable_cpu_affinity", "--dynamo_use_fullgraph", "--dynamo_use_dynamic"}
_DEEPSPEED_FLAGS = {"--no_python", "--module", "--no_local_rank", "--force_multi", "--save_pid",
                    "--bind_cores_to_rank", "--elastic_training", "--no_ssh_check", "--no_ssh",
                    "--enable_each_rank_log"}
_PYTHON_VALUE_OPTS = {"-W", "-X", "--check-hash-based-pycs"}
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_LAUNCHERS = {"torchrun", "accelerate", "deepspeed", "tune"}


@dataclass
class CommandParts:
    """``argv[args_start:]`` are the script's arguments; ``launcher_opts`` the launcher's own."""

    launcher: str | None
    args_start: int
    script: str | None = None
    launcher_opts: dict[str, str | None] = field(default_factory=dict)


def _base(token: str) -> str:
    return os.path.basename(token)


def _scan_options(argv: list[str], i: int, flags: set[str], opts: dict) -> int:
    """Read ``--opt value`` / ``--opt=value`` / flags from ``i``; return the first positional."""
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return i + 1
        if not tok.startswith("-") or tok == "-":
            return i
        if "=" in tok and tok.startswith("--"):
            name, _, value = tok.partition("=")
            opts[name] = value
            i += 1
        elif tok in flags:
            opts[tok] = None
            i += 1
        else:
            opts[tok] = argv[i + 1] if i + 1 < len(argv) else None
            i += 2
    return i


def split_command(argv: list[str]) -> CommandParts:
    return _split(argv, 0)


def _split(argv: list[str], i: int) -> CommandParts:
    if i >= len(argv):
        return CommandParts(None, len(argv))
    prog = _base(argv[i])
    if prog == "env":
        j = i + 1
        while j < len(argv) and (argv[j].startswith("-") or "=" in argv[j]):
            j += 2 if argv[j] in ("-u", "--unset", "-C", "--chdir") else 1
        return _split(argv, j)
    if prog == "torchrun":
        return _after_launcher(argv, i + 1, "torchrun", _TORCHRUN_FLAGS)
    if prog == "accelerate" and i + 1 < len(argv) and argv[i + 1] == "launch":
        return _after_launcher(argv, i + 2, "accelerate", _ACCELERATE_FLAGS)
    if prog == "deepspeed":
        return _after_launcher(argv, i + 1, "deepspeed", _DEEPSPEED_FLAGS)
    if prog == "tune" and i + 1 < len(argv) and argv[i + 1] == "run":
        parts = _after_launcher(argv, i + 2, "tune", _TORCHRUN_FLAGS)
        return parts
    if _PYTHON.match(prog):
        j = i + 1
        while j < len(argv):
            tok = argv[j]
            if tok in ("-m", "-c"):
                if tok == "-m" and j + 1 < len(argv):
                    module = argv[j + 1]
                    if module in ("torch.distributed.run", "torch.distributed.launch"):
                        return _after_launcher(argv, j + 2, "torchrun", _TORCHRUN_FLAGS)
                    if module == "accelerate.commands.launch":
                        return _after_launcher(argv, j + 2, "accelerate", _ACCELERATE_FLAGS)
                    return CommandParts(None, j + 2, script=module)
                return CommandParts(None, min(j + 2, len(argv)))
            if tok in _PYTHON_VALUE_OPTS:
                j += 2
                continue
            if tok.startswith("-") and tok != "-":
                j += 1
                continue
            return CommandParts(None, j + 1, script=tok)
        return CommandParts(None, len(argv))
    if prog in ("bash", "sh", "zsh"):
        j = i + 1
        while j < len(argv) and argv[j].startswith("-"):
            j += 1
        return CommandParts(None, min(j + 1, len(argv)), script=argv[j] if j < len(argv) else None)
    # srun/mpirun/uv run/...: when a known launcher appears later, it is the one that matters.
    for j in range(i + 1, len(argv)):
        if _base(argv[j]) in _LAUNCHERS or _PYTHON.match(_base(argv[j])):
            return _split(argv, j)
    return CommandParts(None, i + 1, script=argv[i])


def _after_launcher(argv: list[str], i: int, launcher: str, flags: set[str]) -> CommandParts:
    opts: dict[str, str | None] = {}
    j = _scan_options(argv, i, flags, opts)
    if j >= len(argv):
        return CommandParts(launcher, len(argv), None, opts)
    script = argv[j]
    if launcher == "torchrun" and _PYTHON.match(_base(script)) and ("--no-python" in opts or "--no_python" in opts):
        inner = _split(argv, j)
        return CommandParts(launcher, inner.args_start, inner.script, opts)
    return CommandParts(launcher, j + 1, script, opts)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None  # "auto", "gpu", "1:4" (elastic) say nothing exact


def command_world(parts: CommandParts) -> dict[str, int | None]:
    """What the launcher's own options say about process count: nproc_per_node, nnodes, world."""
    o = parts.launcher_opts
    if parts.launcher in ("torchrun", "tune"):
        nproc = _int(o.get("--nproc_per_node", o.get("--nproc-per-node")))
        nnodes = _int(o.get("--nnodes")) if "--nnodes" in o else (1 if nproc is not None else None)
    elif parts.launcher == "deepspeed":
        nproc = _int(o.get("--num_gpus", o.get("--num-gpus")))
        nnodes = _int(o.get("--num_nodes", o.get("--num-nodes")))
        if nproc is not None and nnodes is None and "--hostfile" not in o:
            nnodes = 1
    elif parts.launcher == "accelerate":
        total = _int(o.get("--num_processes"))
        nnodes = _int(o.get("--num_machines")) or (1 if total is not None else None)
        nproc = total // nnodes if total is not None and nnodes else None
    else:
        return {"nproc_per_node": None, "nnodes": None, "world_size": None}
    world = nproc * nnodes if nproc is not None and nnodes is not None else None
    return {"nproc_per_node": nproc, "nnodes": nnodes, "world_size": world}
