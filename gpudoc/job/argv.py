"""The one reader of the job's command line: the launcher's own options vs the script's arguments.

``torchrun --nproc_per_node 4 train.py --per_device_train_batch_size 8``: torchrun's options end at
``train.py``; everything after it belongs to the script, which may well have a ``--nnodes`` of its
own. Bindings may touch only the script's arguments; the launcher's are read (world size, job id,
node rank), never changed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Options of each launcher that take no value; any other ``--option`` without ``=`` takes the next
# token as its value.
_TORCHRUN_FLAGS = frozenset({"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                             "--run_path", "--use-env", "--use_env"})
_ACCELERATE_FLAGS = frozenset({"--cpu", "--multi_gpu", "--tpu", "--use_deepspeed", "--use_fsdp", "--use_xpu",
                               "--use_megatron_lm", "-m", "--module", "--no_python", "--debug", "-q", "--quiet",
                               "--same_network", "--tpu_use_cluster", "--tpu_use_sudo", "--downcast_bf16",
                               "--enable_cpu_affinity", "--dynamo_use_fullgraph", "--dynamo_use_dynamic"})
_DEEPSPEED_FLAGS = frozenset({"--no_python", "--module", "--no_local_rank", "--force_multi", "--save_pid",
                              "--bind_cores_to_rank", "--elastic_training", "--no_ssh_check", "--no_ssh",
                              "--enable_each_rank_log"})
# Slurm's and Open MPI's options that take no value (the common ones; `--opt=value` always reads right).
_SRUN_FLAGS = frozenset({"--exclusive", "--overlap", "-l", "--label", "-u", "--unbuffered", "--pty", "-v",
                         "--verbose", "-Q", "--quiet", "-X", "--disable-status", "-K", "--kill-on-bad-exit",
                         "-O", "--overcommit", "-Z", "--no-allocate", "--multi-prog", "-s", "--oversubscribe",
                         "-E", "--preserve-env", "--exact", "--het-group"})
_MPIRUN_FLAGS = frozenset({"--allow-run-as-root", "--oversubscribe", "--tag-output", "--report-bindings", "-v",
                           "--verbose", "-q", "--quiet", "--display-map", "--timestamp-output"})
_PYTHON_VALUE_OPTS = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_LAUNCHERS = frozenset({"torchrun", "accelerate", "deepspeed", "tune"})
_WRAPPERS = {"srun": _SRUN_FLAGS, "mpirun": _MPIRUN_FLAGS, "mpiexec": _MPIRUN_FLAGS}
# Training CLIs that start their own launcher: a launcher's name among their arguments is an option's
# value (axolotl's ``--launcher torchrun -- --nproc_per_node 4``), never the program that runs the job.
FRONT_ENDS = frozenset({"axolotl", "llamafactory-cli", "lmf", "litgpt", "trl"})


def option_key(name: str) -> str:
    """``--nproc-per-node`` and ``--nproc_per_node`` are one option: ``nproc_per_node``."""
    return name.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Options:
    """A launcher's own options as given: spelling-insensitive lookup, the last occurrence wins."""

    values: Mapping[str, str | None] = field(default_factory=dict)

    def get(self, *names: str) -> str | None:
        for name in names:
            key = option_key(name)
            if key in self.values:
                return self.values[key]
        return None

    def has(self, *names: str) -> bool:
        return any(option_key(name) in self.values for name in names)


@dataclass(frozen=True)
class JobCommand:
    """What the job's command line says, read once.

    ``launcher``: torchrun (also ``python -m torch.distributed.run``), accelerate, deepspeed, tune,
    or None for a plain script. ``wrapper``: srun/mpirun in front of it, with its own options.
    ``argv[args_start:]`` are the script's own arguments: the only part bindings may edit.
    """

    argv: tuple[str, ...]
    launcher: str | None
    args_start: int
    script: str | None = None
    options: Options = field(default_factory=Options)
    wrapper: str | None = None
    wrapper_options: Options = field(default_factory=Options)
    program_index: int = 0  # where the program that runs the job starts (after env, srun, ...)
    options_end: int | None = None  # a launcher's: where its own options end (the script, or the end)

    @property
    def script_args(self) -> list[str]:
        return list(self.argv[self.args_start:])

    @property
    def program(self) -> str | None:
        """The program that runs the job: ``python3``, ``torchrun``, ... (after env, srun, uv run)."""
        return self.argv[self.program_index] if self.program_index < len(self.argv) else None


def parse_command(argv: Sequence[str]) -> JobCommand:
    """Read a job's command line (never fails: an unknown program is a plain script)."""
    return _read(tuple(argv), 0, None, Options())


def env_assignments(argv: Sequence[str]) -> dict[str, str]:
    """The variables an ``env NAME=VALUE ...`` in front of the program sets (behind srun/mpirun too):
    the job's environment is the one gpudoc launches it with, with these on top."""
    said: dict[str, str] = {}
    i = 0
    while i < len(argv):
        prog = os.path.basename(argv[i])
        if prog in _WRAPPERS:
            i, _ = _scan(tuple(argv), i + 1, _WRAPPERS[prog])
            continue
        if prog != "env":
            break
        i += 1
        while i < len(argv) and (argv[i].startswith("-") or "=" in argv[i]):
            if argv[i] in ("-u", "--unset") and i + 1 < len(argv):
                said.pop(argv[i + 1], None)
            elif not argv[i].startswith("-"):
                name, _, value = argv[i].partition("=")
                said[name] = value
            i += 2 if argv[i] in ("-u", "--unset", "-C", "--chdir") else 1
    return said


def _scan(argv: tuple[str, ...], i: int, flags: frozenset[str]) -> tuple[int, Options]:
    """Read ``--opt value`` / ``--opt=value`` / flags from ``i``; return the first positional."""
    values: dict[str, str | None] = {}
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return i + 1, Options(values)
        if not tok.startswith("-") or tok == "-":
            break
        if tok.startswith("--") and "=" in tok:
            name, _, value = tok.partition("=")
            values[option_key(name)] = value
            i += 1
        elif tok in flags:
            values[option_key(tok)] = None
            i += 1
        elif not tok.startswith("--") and len(tok) > 2 and tok[2].isdigit():
            values[option_key(tok[:2])] = tok[2:]  # -N2, -n8: a short option with its count attached
            i += 1
        else:
            values[option_key(tok)] = argv[i + 1] if i + 1 < len(argv) else None
            i += 2
    return i, Options(values)


def _read(argv: tuple[str, ...], i: int, wrapper: str | None, wrapper_options: Options) -> JobCommand:
    def plain(args_start: int, script: str | None = None) -> JobCommand:
        return JobCommand(argv, None, min(args_start, len(argv)), script, Options(), wrapper, wrapper_options, i)

    if i >= len(argv):
        return plain(len(argv))
    prog = os.path.basename(argv[i])
    if prog == "env":
        j = i + 1
        while j < len(argv) and (argv[j].startswith("-") or "=" in argv[j]):
            j += 2 if argv[j] in ("-u", "--unset", "-C", "--chdir") else 1
        return _read(argv, j, wrapper, wrapper_options)
    if prog in _WRAPPERS and wrapper is None:
        j, options = _scan(argv, i + 1, _WRAPPERS[prog])
        return _read(argv, j, prog, options)
    if prog == "torchrun":
        return _launcher(argv, i + 1, "torchrun", _TORCHRUN_FLAGS, wrapper, wrapper_options, i)
    if prog == "accelerate" and i + 1 < len(argv) and argv[i + 1] == "launch":
        return _launcher(argv, i + 2, "accelerate", _ACCELERATE_FLAGS, wrapper, wrapper_options, i)
    if prog == "deepspeed":
        return _launcher(argv, i + 1, "deepspeed", _DEEPSPEED_FLAGS, wrapper, wrapper_options, i)
    if prog == "tune" and i + 1 < len(argv) and argv[i + 1] == "run":
        return _launcher(argv, i + 2, "tune", _TORCHRUN_FLAGS, wrapper, wrapper_options, i)
    if _PYTHON.match(prog):
        j = i + 1
        while j < len(argv):
            tok = argv[j]
            if tok == "-m" and j + 1 < len(argv):
                module = argv[j + 1]
                if module in _TORCHRUN_MODULES:
                    return _launcher(argv, j + 2, "torchrun", _TORCHRUN_FLAGS, wrapper, wrapper_options, i)
                if module == "accelerate.commands.launch":
                    return _launcher(argv, j + 2, "accelerate", _ACCELERATE_FLAGS, wrapper, wrapper_options, i)
                return plain(j + 2, module)
            if tok in ("-m", "-c"):
                return plain(j + 2)
            if tok in _PYTHON_VALUE_OPTS:
                j += 2
                continue
            if tok.startswith("-") and tok != "-":
                j += 1
                continue
            return plain(j + 1, tok)
        return plain(len(argv))
    if prog in ("bash", "sh", "zsh"):
        j = i + 1
        while j < len(argv) and argv[j].startswith("-"):
            j += 1
        return plain(j + 1, argv[j] if j < len(argv) else None)
    # uv run / conda run / ... in front: when a known launcher, front-end or Python appears later, it is the one.
    for j in range(i + 1, len(argv) if prog not in FRONT_ENDS else i + 1):
        name = os.path.basename(argv[j])
        # A front-end's name right after an option is that option's value (`conda run -n trl trl sft`).
        front_end = name in FRONT_ENDS and not argv[j - 1].startswith("-")
        if name in _LAUNCHERS or front_end or _PYTHON.match(name):
            return _read(argv, j, wrapper, wrapper_options)
    return plain(i + 1, argv[i])


def _launcher(argv: tuple[str, ...], i: int, launcher: str, flags: frozenset[str], wrapper: str | None,
              wrapper_options: Options, program_index: int) -> JobCommand:
    j, options = _scan(argv, i, flags)
    if j >= len(argv):
        return JobCommand(argv, launcher, len(argv), None, options, wrapper, wrapper_options, program_index, j)
    script = argv[j]
    if launcher == "torchrun" and options.has("--no-python") and _PYTHON.match(os.path.basename(script)):
        inner = _read(argv, j, None, Options())
        return JobCommand(argv, launcher, inner.args_start, inner.script, options, wrapper, wrapper_options,
                          program_index, j)
    return JobCommand(argv, launcher, j + 1, script, options, wrapper, wrapper_options, program_index, j)
