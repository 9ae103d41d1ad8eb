"""What the profile and the job disagree on, found while planning (before anything is written).

Contradictions stop the launch (the job would fail, or gpudoc would reason about a world the job
does not run in): the launcher's process or node count against ``[launch]`` / ``[gpu] count``,
and a config file the framework itself would refuse at start-up as it will be written (each file
preset's ``startup_check``: DeepSpeed's batch arithmetic). Conflicts are
said and the job still runs: a flag or a config value the profile sets but does not bind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from gpudoc.bind.args import KNOWN_FLAGS, PresetResult
from gpudoc.bind.values import LADDER_KNOBS, is_neutral
from gpudoc.configvalues import format_value
from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import ProfileError
from gpudoc.job.sources import bool_flag

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


def flags_at_profile_value(args: list[str], knobs: Mapping[str, Any]) -> set[str]:
    """Knobs the command's own flags already pass at the profile's value (the last occurrence, as
    argparse keeps it): ``KNOWN_FLAGS``, and precision as the Trainer's ``--bf16``/``--fp16`` switches."""
    ed = ArgEdits(args)
    out = set()
    for flag, knob in KNOWN_FLAGS.items():
        found = [occ.value for occ in ed.find((flag,)) if occ.value is not None]
        if knob in knobs and found and found[-1] == format_value(knobs[knob]):
            out.add(knob)
    if knobs.get("precision") in ("bf16", "fp16", "fp32"):
        switched = {name for name in ("bf16", "fp16") if bool_flag(args, f"--{name}")}
        if switched == ({knobs["precision"]} - {"fp32"}):
            out.add("precision")
    return out


def unbound_file_conflicts(st: FileState, knobs: Mapping[str, Any], bound: set[str], *,
                           preset: str | None = None, overridden: frozenset[str] = frozenset(),
                           by: str = "the profile says") -> list[str]:
    """A knob the file hard-codes at another value, bound nowhere in it. ``overridden``: knobs a
    ``key=value`` override on the command line carries, which beats this file where the job composes
    its overrides over it (torchtune's ``--config``, Hydra's composed config), not where the
    framework reads the file itself (``FilePreset.command_overrides``: a DeepSpeed JSON)."""
    if st.fmt == "sh" or st.data is None:
        return []
    from gpudoc.frameworks.registry import file_layout, file_preset  # the frameworks' modules read through bind

    preset = preset or file_layout(st.data, st.path.suffix.lower())
    if preset is None:
        return []

    carried = set(bound) | (set(overridden) if file_preset(preset).command_overrides else set())
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
