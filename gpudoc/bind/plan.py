"""Knobs -> the job: argv, environment and config-file edits, planned without touching anything."""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from gpudoc.bind import jsonedit, pyedit, shell, tomledit, yamledit
from gpudoc.bind.args import ARG_PRESETS, KNOWN_FLAGS, ArgContext, ArgEdits, PresetResult
from gpudoc.bind.filecontext import MISSING, FileContext, FileResult, get
from gpudoc.bind.filepresets import FILE_PRESETS, detect_preset
from gpudoc.bind.overrides import apply_overrides
from gpudoc.bind.values import LADDER_KNOBS, PLACEHOLDER, env_for, format_value, is_neutral
from gpudoc.errors import InputError, ProfileError, UsageError
from gpudoc.job.argv import parse_command
from gpudoc.job.identity import World
from gpudoc.job.identity import world as job_world

if TYPE_CHECKING:
    import re

    from gpudoc.profiles.model import Profile


@dataclass
class FileEdit:
    """One config file's planned change. ``changes`` lists ``{"key", "old", "new"}`` per value."""

    path: Path
    old_text: str
    new_text: str
    diff: str
    changes: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "diff": self.diff, "changes": list(self.changes)}


@dataclass
class BindPlan:
    argv: list[str]
    env: dict[str, str]
    file_edits: list[FileEdit]
    conflicts: list[str]
    # Things worth telling the user that are not problems ("auto" left alone, nanoGPT's
    # accumulation scaled by world size, ...).
    notes: list[str] = field(default_factory=list)

    def diff_text(self) -> str:
        return "".join(edit.diff for edit in self.file_edits)


# -- formats ---------------------------------------------------------------------------------------
_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".py": "py",
            ".sh": "sh", ".bash": "sh"}


def _format(path: Path) -> str:
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ProfileError(f"[bind.files] {path.name}: gpudoc edits .json, .yaml/.yml, .toml, .py and .sh files")
    return fmt


def _load(fmt: str, text: str, name: str) -> Any:
    if fmt == "json":
        return jsonedit.load(text, name)
    if fmt == "yaml":
        return yamledit.plain(yamledit.load(text, name))
    if fmt == "toml":
        return tomledit.load(text, name)
    if fmt == "py":
        return pyedit.load(text, name)
    raise AssertionError(fmt)


def _set(fmt: str, text: str, path: tuple[str, ...], value: Any, name: str) -> str:
    editor = {"json": jsonedit, "yaml": yamledit, "toml": tomledit, "py": pyedit}[fmt]
    return editor.set_value(text, path, value, name=name)


def _with(data: Any, path: tuple[str, ...], value: Any) -> Any:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value
    return out


def unified_diff(old: str, new: str, label: str) -> str:
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{label}", tofile=f"b/{label}"):
        lines.append(line)
        if not line.endswith("\n"):
            lines.append("\n\\ No newline at end of file\n")
    return "".join(lines)


class _FileState:
    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label
        self.fmt = _format(path)
        try:
            self.old_text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"{label}: file not found (bound in the profile or named by the command)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{label}: cannot read: {exc}") from None
        self.text = self.old_text
        self.changes: list[dict] = []
        self.data = _load(self.fmt, self.text, label) if self.fmt != "sh" else None

    def assign(self, path: tuple[str, ...], value: Any) -> None:
        old = get(self.data, path)
        if old is not MISSING and type(old) is type(value) and old == value:
            return
        new_text = _set(self.fmt, self.text, path, value, self.label)
        new_data = _load(self.fmt, new_text, self.label)
        # The editors are surgical; this proves it: the file must read back as before with only
        # this one value changed.
        if new_data != _with(self.data, path, value):
            raise InputError(f"{self.label}: editing '{'.'.join(path)}' would change more than that value; "
                             f"edit it by hand or bind it differently")
        self.text, self.data = new_text, new_data
        self.changes.append({"key": ".".join(path), "old": None if old is MISSING else old, "new": value})

    def edit(self) -> FileEdit | None:
        if self.text == self.old_text:
            return None
        return FileEdit(self.path, self.old_text, self.text, unified_diff(self.old_text, self.text, self.label),
                        self.changes)


# -- planning --------------------------------------------------------------------------------------
def substitute(argv: list[str], values: Mapping[str, Any]) -> list[str]:
    """``{knob}`` -> value; ``{{name}}`` -> literal ``{name}``; other braces (JSON) untouched."""
    out = []
    for tok in argv:
        def repl(m: re.Match[str]) -> str:
            if m.group(1):
                return "{" + m.group(2) + "}"
            name = m.group(4)
            if name not in values:
                known = ", ".join(sorted(values)) or "none"
                raise UsageError(f"unknown placeholder {{{name}}} in the command (knobs: {known}); "
                                 f"write {{{{{name}}}}} for a literal")
            return format_value(values[name])
        out.append(PLACEHOLDER.sub(repl, tok))
    return out


def _placeholder_knobs(argv: list[str]) -> set[str]:
    return {m.group(4) for tok in argv for m in PLACEHOLDER.finditer(tok) if m.group(4)}


def plan_bindings(profile: Profile, command: list[str], *, cwd: Path) -> BindPlan:
    """What ``gpudoc run`` will launch and change for ``profile``; reads files, writes nothing.

    Raises ProfileError when a preset cannot carry a knob the ladder may change (a silent no-op
    would make ``fix`` useless), UsageError for an unknown ``{placeholder}``.
    """
    cwd = Path(cwd)
    knobs = dict(profile.knobs)
    bind = dict(profile.bind or {})
    values = {**knobs, **{k: v for k, v in dict(profile.launch).items() if k in ("nproc_per_node", "nnodes")},
              "world_size": profile.world_size}
    argv = substitute(list(command), values)
    env = env_for(knobs) if profile.bind_env else {}
    parts = parse_command(argv)
    cmd_world = job_world(parts)
    world = cmd_world.world_size or profile.world_size
    conflicts: list[str] = _launch_conflicts(profile, parts.launcher, cmd_world)
    notes: list[str] = []
    results: list[tuple[str, PresetResult]] = []
    files: dict[Path, _FileState] = {}
    explicit: set[str] = set()
    bound_in_file: dict[Path, set[str]] = {}

    def state(path_text: str) -> _FileState:
        path = (cwd / path_text) if not Path(path_text).is_absolute() else Path(path_text)
        key = path.resolve()
        if key not in files:
            files[key] = _FileState(path, path_text)
        return files[key]

    def run_file_preset(st: _FileState, preset: str, hf_mode: bool) -> None:
        if st.fmt == "sh":
            raise ProfileError(f"[bind.files] {st.label}: a shell script takes an argument preset "
                               f"({', '.join(sorted(ARG_PRESETS))}), not '{preset}'")
        ctx = FileContext(st.label, knobs, world, hf_mode)
        res: FileResult = FILE_PRESETS[preset].write(st.data, ctx)
        for path, value, _knob in res.assignments:
            st.assign(path, value)
        bound_in_file.setdefault(st.path.resolve(), set()).update(res.expressed)
        results.append((f"{preset} ({st.label})", res))
        for follow_path, follow_preset, follow_hf in res.follow:
            run_file_preset(state(follow_path), follow_preset, follow_hf)

    # 1. Arguments.
    arg_preset = bind.get("args")
    if arg_preset:
        if arg_preset not in ARG_PRESETS:
            raise ProfileError(f"[bind] args = '{arg_preset}': unknown preset; one of "
                               f"{', '.join(sorted(ARG_PRESETS))}")
        ed = ArgEdits(argv[parts.args_start:])
        only = bind.get("args_knobs")  # the knobs that live on the command line; the rest are in files
        arg_knobs = knobs if only is None else {k: v for k, v in knobs.items() if k in only}
        res = ARG_PRESETS[arg_preset](ed, arg_knobs, ArgContext(world, parts.launcher))
        argv = argv[: parts.args_start] + ed.result()
        results.append((arg_preset, res))
        for ds in res.deepspeed_files:
            run_file_preset(state(ds), "deepspeed", True)
    else:
        conflicts.extend(_unbound_flag_conflicts(argv[parts.args_start:], knobs))
    script_args, carried = apply_overrides(argv[parts.args_start:], bind, knobs)
    argv, explicit = argv[: parts.args_start] + script_args, explicit | carried

    # 2. Files named in the profile.
    for path_text, spec in dict(bind.get("files") or {}).items():
        st = state(path_text)
        preset, mapping = _file_spec(path_text, spec)
        if st.fmt == "sh":
            res = _shell_file(st, preset, mapping, knobs, world)
            if preset:
                results.append((f"{preset} ({st.label})", res))
            explicit.update(mapping)
            for ds in res.deepspeed_files:
                run_file_preset(state(ds), "deepspeed", True)
            continue
        if preset:
            if preset not in FILE_PRESETS:
                raise ProfileError(f"[bind.files] {path_text}: unknown preset '{preset}'; one of "
                                   f"{', '.join(sorted(FILE_PRESETS))}")
            run_file_preset(st, preset, hf_mode=False)
        for knob, key_path in mapping.items():
            if knob not in knobs:
                continue
            st.assign(tuple(str(key_path).split(".")), knobs[knob])
            explicit.add(knob)
            bound_in_file.setdefault(st.path.resolve(), set()).add(knob)
        if not preset:
            conflicts.extend(_unbound_file_conflicts(st, knobs, bound_in_file.get(st.path.resolve(), set())))

    # 3. A DeepSpeed JSON the command names while no preset binds it: check, do not edit.
    if not arg_preset:
        for occ in ArgEdits(argv[parts.args_start:]).find(("--deepspeed",)):
            if occ.value and Path(cwd / occ.value).is_file() and (cwd / occ.value).resolve() not in files:
                st = state(occ.value)
                conflicts.extend(_unbound_file_conflicts(st, knobs, set(), preset="deepspeed"))

    # 4. Every ladder knob must reach the job when presets are in use.
    for _, res in results:
        notes.extend(res.notes)
        conflicts.extend(res.conflicts)
    if results:
        # Knobs the user says the job reads from GPUDOC_<KNOB> reach it through the environment.
        via_env = set(bind.get("via_env", ())) if profile.bind_env else set()
        for knob in sorted(via_env - set(knobs)):
            close = difflib.get_close_matches(knob, list(knobs), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ProfileError(f"{profile.path}: bind.via_env: '{knob}' is not a knob in [train]{hint}")
        _require_expressed(profile, knobs, results, explicit | via_env | _placeholder_knobs(list(command)))

    edits = [e for e in (st.edit() for st in files.values()) if e is not None]
    return BindPlan(argv, env, edits, list(dict.fromkeys(conflicts)), list(dict.fromkeys(notes)))


def _file_spec(path_text: str, spec: Any) -> tuple[str | None, dict[str, str]]:
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        mapping = {k: v for k, v in spec.items() if k != "preset"}
        for knob, key in mapping.items():
            if not isinstance(key, str) or not key:
                raise ProfileError(f"[bind.files.\"{path_text}\"] {knob}: expected a key path string, got {key!r}")
        return spec.get("preset"), mapping
    raise ProfileError(f"[bind.files] \"{path_text}\": expected a preset name or a table of knob = \"key.path\"")


def _shell_file(st: _FileState, preset: str | None, mapping: dict[str, str], knobs: Mapping[str, Any],
                world: int) -> PresetResult:
    if preset and preset not in ARG_PRESETS:
        raise ProfileError(f"[bind.files] {st.label}: unknown argument preset '{preset}'; one of "
                           f"{', '.join(sorted(ARG_PRESETS))}")
    words = shell.main_command(shell.tokenize(st.text, st.label))
    parts = parse_command([w.value for w in words])
    ed = ArgEdits([w.value for w in words[parts.args_start:]])
    res = ARG_PRESETS[preset](ed, knobs, ArgContext(world, parts.launcher)) if preset else PresetResult()
    for knob, flag in mapping.items():
        if knob in knobs:
            if isinstance(knobs[knob], bool):
                ed.set_bool((flag,), knobs[knob])
            else:
                ed.set_value((flag,), format_value(knobs[knob]))
            res.expressed.add(knob)
    before = [w.value for w in words]
    new_text = shell.apply_to_text(st.text, words, parts.args_start, ed)
    # Read the script back: the command must now carry exactly the planned arguments.
    after = [w.value for w in shell.main_command(shell.tokenize(new_text, st.label))]
    if not _same_with_append(after, before[: parts.args_start] + ed.result()[: len(ed.result()) - len(ed.append)],
                             ed.append, parts.args_start):
        raise InputError(f"{st.label}: could not edit the script's flags safely; edit it by hand")
    for idx, new in sorted(ed.replace.items()):
        st.changes.append({"key": words[parts.args_start + idx].value if new is None else
                           _flag_of(ed.tokens, idx), "old": ed.tokens[idx], "new": new})
    if ed.append:
        st.changes.append({"key": "(appended)", "old": None, "new": " ".join(ed.append)})
    st.text = new_text
    return res


def _same_with_append(after: list[str], kept: list[str], appended: list[str], start: int) -> bool:
    """``after`` is ``kept`` with ``appended`` inserted as one run among the script's arguments
    (a new continuation line goes before the command's last line, not at its very end)."""
    if not appended:
        return after == kept
    n = len(appended)
    return any(after[k:k + n] == appended and after[:k] + after[k + n:] == kept
               for k in range(start, len(after) - n + 1))


def _flag_of(tokens: list[str], idx: int) -> str:
    tok = tokens[idx]
    if tok.startswith("-"):
        return tok.split("=", 1)[0]
    return tokens[idx - 1] if idx > 0 else tok


def _launch_conflicts(profile: Profile, launcher: str | None, cmd: World) -> list[str]:
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


def _unbound_flag_conflicts(args: list[str], knobs: Mapping[str, Any]) -> list[str]:
    out = []
    ed = ArgEdits(args)
    for flag, knob in KNOWN_FLAGS.items():
        if knob not in knobs:
            continue
        for occ in ed.find((flag,)):
            if occ.value is not None and occ.value != format_value(knobs[knob]):
                out.append(f"the command passes {flag} {occ.value} but the profile says {knob} = "
                           f"{format_value(knobs[knob])}, and [bind] args is not set to pass it")
    return out


def _unbound_file_conflicts(st: _FileState, knobs: Mapping[str, Any], bound: set[str], *,
                            preset: str | None = None) -> list[str]:
    if st.fmt == "sh" or st.data is None:
        return []
    preset = preset or detect_preset(st.data, st.path.suffix.lower())
    if preset is None:
        return []
    out = []
    for knob, value in FILE_PRESETS[preset].read(st.data).items():
        if knob in knobs and knob not in bound and value != knobs[knob]:
            out.append(f"{st.label} hard-codes {knob} = {format_value(value)} but the profile says "
                       f"{format_value(knobs[knob])} and does not bind it into that file")
    return out


def _require_expressed(profile: Profile, knobs: Mapping[str, Any], results: list[tuple[str, PresetResult]],
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
        why = "; ".join(reasons) if reasons else f"none of the bindings ({names}) has a place for it"
        problems.append(f"{knob} = {format_value(knobs[knob])} ({why})")
    if problems:
        where = f"{profile.path}: " if getattr(profile, "path", None) else ""
        raise ProfileError(f"{where}[bind] cannot pass " + "; ".join(problems) +
                           ". Bind it another way ([bind.files], a {knob} placeholder, or [bind] via_env = [\"<knob>\"] when "
                           "the job reads GPUDOC_<KNOB> itself) or remove it from [train]")
