"""The resolved profile: ``extends`` applied, validated, read-only."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from gpudoc.job.knobs import JobReading

# The knobs gpudoc itself understands; [train] may declare more (custom knobs).
KNOWN_KNOBS = (
    "micro_batch_size",
    "gradient_accumulation_steps",
    "max_seq_len",
    "gradient_checkpointing",
    "precision",
    "zero_stage",
    "offload_optimizer",
    "offload_params",
    "optimizer",
    "lora_rank",
    "quantization",
    "attention",
)

DEFAULT_TARGET_UTILIZATION = 0.85


@dataclass(frozen=True)
class UserRung:
    name: str
    knob: str
    op: str
    value: Any = None
    semantic: bool = False
    min: float | None = None
    saving_fraction: float | None = None


@dataclass(frozen=True)
class Profile:
    """A profile after lookup, ``extends`` and validation.

    ``path`` is the file the user named (the leaf of the ``extends`` chain); ``chain`` lists every
    file from leaf to root. ``shipped`` is true when the leaf is one of gpudoc's bundled profiles,
    which are never edited in place.
    """

    name: str
    path: Path | None = None
    chain: tuple[Path, ...] = ()
    shipped: bool = False
    description: str = ""
    gpu: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    launch: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    estimate: Mapping[str, Any] = field(default_factory=dict)
    bind: Mapping[str, Any] = field(default_factory=dict)
    ladder: Mapping[str, Any] = field(default_factory=dict)
    run: Mapping[str, Any] = field(default_factory=dict)
    runs: Mapping[str, Any] = field(default_factory=dict)
    # With no profile file: what the job's own command line and config files said (the knobs'
    # places, written back there by ``bindings``). ``train`` holds the values to launch with.
    job: JobReading | None = field(default=None, compare=False)

    def for_planning(self) -> Profile:
        """What the planner binds: the profile itself, or, for a job read from its command, only
        the knobs that differ from what the command says, each bound to where it was read."""
        if self.job is None:
            return self
        from dataclasses import replace

        changed = self.changed_knobs()
        return replace(self, train=changed, bind=self.job.bindings(changed))

    def changed_knobs(self) -> dict[str, Any]:
        """Knobs whose value differs from what the job's command says (all of them for a profile)."""
        if self.job is None:
            return dict(self.train)
        said = self.job.values
        return {k: v for k, v in self.train.items() if k not in said or said[k] != v or type(said[k]) is not type(v)}

    def _knobs_with_places(self) -> dict[str, dict[str, Any]]:
        """A job read from its command: each knob's value with where it lives (the record's form)."""
        places = self.job.places if self.job is not None else {}
        return {k: {"value": v, "where": places.get(k, "default")} for k, v in self.train.items()}

    @property
    def knobs(self) -> Mapping[str, Any]:
        """Every ``[train]`` value, known and custom: what bindings export and rungs change."""
        return self.train

    @property
    def world_size(self) -> int:
        return int(self.launch.get("nproc_per_node") or self.gpu.get("count") or 1) * int(
            self.launch.get("nnodes") or 1
        )

    @property
    def data_parallel_size(self) -> int:
        """The ranks that each take their own micro batch: the world size over the model-parallel
        degrees ``[launch]`` gives (pipeline stages, tensor and context ranks hold one model together);
        the world size where they do not divide it (the estimate refuses that profile)."""
        from gpudoc.estimate.defaults import PARALLEL_KEYS

        parallel = math.prod(int(self.launch.get(key) or 1) for key in PARALLEL_KEYS)
        return self.world_size // parallel if self.world_size % parallel == 0 else self.world_size

    @property
    def global_batch_size(self) -> int | None:
        mbs = self.train.get("micro_batch_size")
        if mbs is None:
            return None
        return int(mbs) * int(self.train.get("gradient_accumulation_steps") or 1) * self.data_parallel_size

    @property
    def target_utilization(self) -> float:
        return float(self.ladder.get("target_utilization", DEFAULT_TARGET_UTILIZATION))

    @property
    def allow_semantic(self) -> bool:
        return bool(self.ladder.get("allow_semantic", False))

    @property
    def user_rungs(self) -> tuple[UserRung, ...]:
        return tuple(UserRung(**r) for r in self.ladder.get("rung", ()))

    @property
    def bind_env(self) -> bool:
        return bool(self.bind.get("env", True))

    def with_train(self, changes: Mapping[str, Any]) -> Profile:
        """A copy with some knobs changed (the ladder's proposals, before they are written)."""
        from dataclasses import replace

        return replace(self, train={**self.train, **changes})

    def with_changes(self, knobs: Mapping[str, Any], env: Mapping[str, str]) -> Profile:
        """A copy with a rung's knob and environment changes (a job read from its command keeps
        them in memory: the relaunch writes each where it lives)."""
        from dataclasses import replace

        return replace(self, train={**self.train, **knobs}, env={**self.env, **env})

    def to_dict(self) -> dict:
        """Resolved view for run records and ``profile show --json``."""
        return {
            "name": self.name,
            "path": str(self.path) if self.path else None,
            "shipped": self.shipped,
            "description": self.description,
            "gpu": dict(self.gpu),
            "env": dict(self.env),
            "knobs": dict(self.train) if self.job is None else self._knobs_with_places(),
            **({"source": "command", "framework": self.job.framework} if self.job is not None else {}),
            "launch": dict(self.launch),
            "model": dict(self.model),
            "estimate": dict(self.estimate),
            "bind": dict(self.bind),
            "ladder": dict(self.ladder),
            "run": dict(self.run),
            "runs": dict(self.runs),
        }


EMPTY = Profile(name="(none)")
