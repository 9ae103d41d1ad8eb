"""What the profile and the job disagree on, found while planning (before anything is written).

Contradictions stop the launch (the job would fail, or gpudoc would reason about a world the job
does not run in): the launcher's process or node count against ``[launch]`` / ``[gpu] count``,
and a DeepSpeed ``train_batch_size`` that is not micro x accumulation x world size. Conflicts are
said and the job still runs: a flag or a config value the profile sets but does not bind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from gpudoc.bind.args import KNOWN_FLAGS, PresetResult
from gpudoc.bind.values import LADDER_KNOBS, is_neutral
from gpudoc.configvalues import format_value, get, num
from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import ProfileError

if TYPE_CHECKING:
    from gpudoc.bind.filestate import FileState
    from gpudoc.job.identity import World
    from gpudoc.profiles.model import Profile


def launch_contradictions(profile: Profile, launcher: str | None, cmd: World) -> list[str]:
    out = []
    launch = dict(profile.launch)
    want_nproc = launch.get("nproc_per_node") or dict(profile.gpu).get("count")
    where = "[launch] nproc_per_node" if launch.get("nproc_per_node") else "[gpu] count"
    if cmd.nproc_per_node is not None and want_nproc and cmd.nproc_per_node != want_nproc:
        out.append(f"the command starts {cmd.nproc_per_node} processes per node ({launcher}) but the "
                   f"profile's {where} = {want_nproc}")
    if cmd.nnodes is not None and launch.get("nnodes") and cmd.nnodes != launch["nnodes"]:
        out.append(f"the command runs on {cmd.nnodes} node(s) ({launcher}) but the profile's "
                   f"[launch] nnodes = {launch['nnodes']}")
    return out


def deepspeed_batch_contradiction(st: FileState, knobs: Mapping[str, Any], world_size: int) -> str | None:
    """DeepSpeed asserts ``train_batch_size == micro x accumulation x world size`` at start-up, its world
    size the data-parallel ranks; checked on the file as it will be written (``"auto"`` values are filled
    by the Trainer, an accumulation nothing says is DeepSpeed's to derive)."""
    if st.data is None:
        return None
    tbs = num(get(st.data, ("train_batch_size",)))
    micro = num(get(st.data, ("train_micro_batch_size_per_gpu",)))
    accum = num(get(st.data, ("gradient_accumulation_steps",)))
    micro = micro if micro is not None else num(knobs.get("micro_batch_size"))
    accum = accum if accum is not None else num(knobs.get("gradient_accumulation_steps"))
    if accum is None and tbs is not None and micro:
        # Neither the JSON nor the job says: DeepSpeed derives it, train_batch_size // micro // ranks
        # (deepspeed/runtime/config.py, _set_batch_related_parameters), then asserts the product.
        accum = max(1, int(tbs // micro // world_size))
    if tbs is None or micro is None or accum is None or micro * accum * world_size == tbs:
        return None
    product = micro * accum * world_size
    return (f"{st.label}: train_batch_size = {tbs} but micro batch x gradient accumulation x world size = "
            f"{micro} x {accum} x {world_size} = {product}; set train_batch_size to {product} (or \"auto\") "
            f"or change the profile")


def refuse(profile: Profile, contradictions: list[str]) -> None:
    if contradictions:
        where = f"{profile.path}: " if getattr(profile, "path", None) else ""
        raise ProfileError(where + "; ".join(dict.fromkeys(contradictions)))


def whose(profile: Profile) -> str:
    """Who sets the knobs, for the notes: the profile, or gpudoc itself changing a job read from its
    command line (there is no profile to name)."""
    return "the profile says" if profile.job is None else "gpudoc now sets"


def unbound_flag_conflicts(args: list[str], knobs: Mapping[str, Any], *, by: str = "the profile says") -> list[str]:
    out = []
    ed = ArgEdits(args)
    for flag, knob in KNOWN_FLAGS.items():
        if knob not in knobs:
            continue
        for occ in ed.find((flag,)):
            if occ.value is not None and occ.value != format_value(knobs[knob]):
                out.append(f"the command passes {flag} {occ.value} but {by} {knob} = "
                           f"{format_value(knobs[knob])}, and [bind] args is not set to pass it")
    return out


def unbound_file_conflicts(st: FileState, knobs: Mapping[str, Any], bound: set[str], *,
                           preset: str | None = None, overridden: frozenset[str] = frozenset(),
                           by: str = "the profile says") -> list[str]:
    """A knob the file hard-codes at another value, bound nowhere in it. ``overridden``: knobs a
    ``key=value`` override on the command line carries, which beats this file (torchtune's
    ``--config``, Hydra's composed config) but not a DeepSpeed JSON (DeepSpeed reads it itself)."""
    if st.fmt == "sh" or st.data is None:
        return []
    from gpudoc.frameworks.registry import file_layout, file_preset  # the frameworks' modules read through bind

    preset = preset or file_layout(st.data, st.path.suffix.lower())
    if preset is None:
        return []

    carried = set(bound) | (set() if preset == "deepspeed" else set(overridden))
    out = []
    for knob, value in file_preset(preset).read(st.data).items():
        if knob in knobs and knob not in carried and value != knobs[knob]:
            out.append(f"{st.label} hard-codes {knob} = {format_value(value)} but {by} "
                       f"{format_value(knobs[knob])} and does not bind it into that file")
    return out


def require_expressed(profile: Profile, knobs: Mapping[str, Any], results: list[tuple[str, PresetResult]],
                      explicit: set[str]) -> None:
    expressed = set(explicit)
    for _, res in results:
        expressed |= res.expressed
    problems = []
    for knob in LADDER_KNOBS:
        if knob not in knobs or knob in expressed:
            continue
        reasons = [res.cannot[knob] for _, res in results if knob in res.cannot]
        if not reasons and is_neutral(knob, knobs[knob]):
            continue
        names = ", ".join(name for name, _ in results)
        why = ("; ".join(reasons) if reasons else f"none of the bindings ({names}) has a place for it" if names
               else "no binding carries it and [bind] env = false exports no GPUDOC_* variable")
        problems.append(f"{knob} = {format_value(knobs[knob])} ({why})")
    if problems:
        where = f"{profile.path}: " if getattr(profile, "path", None) else ""
        env_way = ("[bind] via_env = [\"<knob>\"] when the job reads GPUDOC_<KNOB> itself" if profile.bind_env
                   else "[bind] env = true when the job reads GPUDOC_<KNOB> itself")
        raise ProfileError(f"{where}[bind] cannot pass " + "; ".join(problems) +
                           f". Bind it another way ([bind] args = PRESET for its flags, [bind.files], a {{knob}} "
                           f"placeholder in the command, or {env_way}) or remove it from [train]")
