"""`gpudoc profile list|show|new`: find, inspect and start profiles."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from gpudoc.atomic import atomic_write_text, refuse_read_only
from gpudoc.errors import ExitStatus, GpudocError, UsageError
from gpudoc.profiles.json_schema import directive, schema_text
from gpudoc.profiles.loader import list_profile_names, load_profile, search_dirs, shipped_profiles_dir
from gpudoc.render.show import show
from gpudoc.results.profile import ProfileListResult, ProfileNewResult, ProfileShowResult
from gpudoc.units import GIB
from gpudoc.workspace import Workspace

_ORIGIN = ("project", "user", "shipped")


def list_profiles(ws: Workspace, *, as_json: bool = False) -> int:
    console, cwd = ws.console, ws.cwd
    origins = dict(zip(search_dirs(cwd), _ORIGIN))
    rows = []
    for name, path in sorted(list_profile_names(cwd, say=console.error).items()):
        try:
            description = load_profile(str(path), cwd, say=console.error).description
        except GpudocError as exc:
            description = f"(invalid: {exc})"
        rows.append({"name": name, "origin": origins.get(path.parent, "?"), "path": str(path), "description": description})
    return show(ProfileListResult(tuple(rows)), console, as_json=as_json)


def show_profile(ws: Workspace, name: str, *, as_json: bool = False) -> int:
    profile = ws.load_profile(name)
    data = profile.to_dict()
    data["extends_chain"] = [str(p) for p in profile.chain]
    data["world_size"] = profile.world_size
    data["global_batch_size"] = profile.global_batch_size
    return show(ProfileShowResult(data, shipped=profile.shipped), ws.console, as_json=as_json)


def new_profile(ws: Workspace, name: str, *, from_gpu: bool = False, snapshots: tuple[str, ...] = (),
                force: bool = False, from_run: str | None = None) -> int:
    console = ws.console
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name.endswith(".toml"):
        raise UsageError(f"profile name {name!r} must be a plain name (letters, digits, '.', '_', '-'), e.g. my-box")
    target = ws.cwd / ".gpudoc" / "profiles" / f"{name}.toml"
    if target.exists() and not force:
        raise UsageError(f"{target} already exists (use --force to replace it; a backup is kept)")
    if target.exists():
        refuse_read_only(target)  # the user's "do not edit", --force or not
    gpu_lines = ["count = 1", "min_free_gib = 10"]
    extends = None
    comment = "# Fill in your GPUs: `gpudoc profile new NAME --from-gpu` reads them from the driver."
    if from_gpu:
        extends, gpu_lines, comment = _from_gpu(ws, snapshots)
    text = _template(name, extends, gpu_lines, comment) if from_run is None else _from_run(ws, name, from_run)
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = _keep_replaced(ws, target) if target.exists() else None
    atomic_write_text(target, text)
    return show(ProfileNewResult(str(target), name, kept=kept), console, as_json=False)


def _keep_replaced(ws: Workspace, target: Path) -> str:
    """Where the profile ``--force`` replaces is kept: its first backup (``atomic.backup``, which
    never follows a link planted there) when it holds these bytes; else, the backup holding an
    earlier profile, the run store's unlisted originals (pruned by [runs] keep)."""
    from gpudoc.atomic import backup
    from gpudoc.runs.edits import keep_original, unlisted_folder

    kept: list[str] = []

    def held(data: bytes) -> bool:
        try:
            kept.append(str(unlisted_folder(ws.store.home) / keep_original(ws.store, data, listed=False)))
        except (GpudocError, OSError):
            return False  # nowhere to keep them: backup() refuses, nothing is written
        return True

    saved = backup(target, held=held)
    return kept[0] if kept else str(saved)


def print_schema(ws: Workspace) -> int:
    """The profile's JSON Schema, as the shipped file holds it."""
    ws.console.out.write(schema_text())
    return 0


def _from_gpu(ws: Workspace, snapshots: tuple[str, ...]) -> tuple[str | None, list[str], str]:
    facts = ws.gather(snapshot_files=tuple(ws.cwd / s for s in snapshots))
    gpus = [g for g in facts.gpus if g.memory_total_bytes]
    if not gpus:
        reason = facts.nvml_error or "the driver reports no GPU"
        raise GpudocError(f"--from-gpu: no GPU to read ({reason})", exit_status=ExitStatus.NEGATIVE)
    smallest = min(g.memory_total_bytes or 0 for g in gpus) / GIB
    tier = _nearest_tier(smallest)
    names = sorted({g.name or "unknown" for g in gpus})
    lines = [
        f"count = {len(gpus)}",
        f'name = "{names[0]}"' if len(names) == 1 else f"# mixed GPUs: {', '.join(names)}",
        f"memory_gib = {smallest:.2f}",
        f"min_free_gib = {smallest * 0.9:.1f}      # 90% of the smallest card",
    ]
    comment = f"# Read from {facts.source}: {len(gpus)} x {', '.join(names)}."
    return tier, lines, comment


def _from_run(ws: Workspace, name: str, run_id: str) -> str:
    """A profile holding what gpudoc read from a run's command: its knobs (the values it last ran
    with), world, environment, and the bindings that write each knob where the command keeps it."""
    import tomlkit

    from gpudoc.profiles.from_job import recorded_job_profile

    record = ws.store.named_or_latest(run_id or None)
    profile = recorded_job_profile(record, ws.environ)
    if profile is None or profile.job is None:
        raise UsageError(f"--from-run: run {record.id} ran with the profile {record.profile_path or '(none)'}, "
                         "not from its command line; use that profile")
    if not profile.train:
        raise UsageError(f"--from-run: gpudoc read no knobs from run {record.id}'s command "
                         f"({' '.join(record.command)}); write [train] and [bind] by hand")
    doc = tomlkit.document()
    # What that run launched, whose values [train] holds (a relaunch's, not the command as typed).
    doc.add(tomlkit.comment(f"Read by gpudoc from run {record.id}: {shlex.join(record.launched)}"))
    doc.add("description", f"{name}: {profile.job.framework} job")
    places = profile.job.places
    train = tomlkit.table()
    for knob, value in profile.train.items():
        item = tomlkit.item(value)
        item.comment(places.get(knob, "added by gpudoc"))
        train.add(knob, item)
    doc.add("train", train)
    if profile.launch:
        doc.add("launch", dict(profile.launch))
    env = record.profile.get("env") if record.profile else None
    if env:
        doc.add("env", dict(env))
    doc.add("bind", profile.job.bindings(profile.train))
    return f"{directive()}\n{tomlkit.dumps(doc)}"


def _nearest_tier(gib: float) -> str | None:
    tiers = []
    for path in shipped_profiles_dir().glob("gpu-*gb.toml"):
        try:
            tiers.append((float(load_profile(str(path)).gpu.get("memory_gib", 0)), path.stem))
        except GpudocError:
            continue
    fitting = [t for t in sorted(tiers) if t[0] <= gib + 0.5]
    return fitting[-1][1] if fitting else None


def _template(name: str, extends: str | None, gpu_lines: list[str], comment: str) -> str:
    head = [f'description = "{name}"']
    if extends:
        head.append(f'extends = "{extends}"              # shipped tier: allocator and tokenizer settings')
    gpu = "\n".join(gpu_lines)
    return f"""{directive()}
{chr(10).join(head)}

{comment}
[gpu]
{gpu}

[env]
TOKENIZERS_PARALLELISM = "false"

[train]                                  # the knobs your job reads (see `gpudoc run --dry-run`)
micro_batch_size = 1
gradient_accumulation_steps = 8
# max_seq_len = 2048
# gradient_checkpointing = true
# precision = "bf16"                     # fp32 | fp16 | bf16 | bf16-true

[launch]
nproc_per_node = 1

# [model]                                # for `gpudoc estimate` (or the job's --model_name_or_path)
# hf_config = "ORG/NAME"                 # a config.json, its directory, or a model id in the local HF cache

[bind]
env = true                               # the job sees GPUDOC_MICRO_BATCH_SIZE, ...
"""
