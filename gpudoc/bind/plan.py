"""Knobs -> the job: argv, environment and config-file edits, planned without touching anything."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from gpudoc.bind import shell
from gpudoc.bind.argchanges import arg_changes
from gpudoc.bind.args import ArgContext, PresetResult
from gpudoc.bind.conflicts import (
    flags_at_profile_value,
    launch_contradictions,
    refuse,
    require_expressed,
    unbound_file_conflicts,
    unbound_flag_conflicts,
    whose,
)
from gpudoc.bind.filecontext import FileContext, FileResult
from gpudoc.bind.filestate import FileEdit, FileState, unified_diff
from gpudoc.bind.overrides import apply_flags, apply_overrides
from gpudoc.bind.targets import Target, check_files_table, fit, targets
from gpudoc.bind.values import PLACEHOLDER, env_for
from gpudoc.configvalues import MISSING, format_value
from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import InputError, ProfileError, UsageError
from gpudoc.job.argv import parse_command
from gpudoc.job.identity import world as job_world

if TYPE_CHECKING:
    import re

    from gpudoc.profiles.model import Profile

__all__ = ["BindPlan", "FileEdit", "plan_bindings", "substitute", "unified_diff"]


@dataclass
class BindPlan:
    argv: list[str]
    env: dict[str, str]
    file_edits: list[FileEdit]
    conflicts: list[str]
    # Things worth telling the user that are not problems ("auto" left alone, nanoGPT's
    # accumulation scaled by world size, ...).
    notes: list[str] = field(default_factory=list)
    # Every place a knob was put, changed or not: {"knob", "file", "key", "old", "new", "added"}
    # ("file" is "command" for the job's own arguments).
    bindings: list[dict] = field(default_factory=list)

    def diff_text(self) -> str:
        return "".join(edit.diff for edit in self.file_edits)

    def said(self, before: Sequence[str] | None = None) -> list[str]:
        """One line per changed flag of the command and per changed file: what, from what to what.

        ``before``: the command the attempt this one relaunches ran. A flag is then said from the
        value that attempt had, as a file is (edited in place, it holds that attempt's value), not
        from the command as typed: "8 -> 4" at the second relaunch, not "16 -> 4"."""
        flags = [b for b in self.bindings if b["file"] == "command"]
        if before is not None:
            flags = [since for b in flags if (since := _since(b, before)) is not None]
        lines = [f"command: {_change(b)}" for b in flags if _changed(b)]
        for edit in self.file_edits:
            lines.append(f"{edit.label or Path(edit.path).name}: " + ", ".join(_change(c) for c in edit.changes))
        return lines


def _since(b: Mapping[str, Any], before: Sequence[str]) -> dict[str, Any] | None:
    """The binding ``b`` as a change from the command ``before`` (its flag's last value there);
    None for a flag removed that ``before`` did not have either."""
    found = ArgEdits(list(before)).find((b["key"],))
    if not found:
        return {**b, "old": None, "added": True} if b["new"] is not None else None
    value = found[-1].value
    old = "" if value is None or (value.startswith("-") and not found[-1].eq) else value  # a bare switch
    return {**b, "old": old, "added": False}


def _changed(b: Mapping[str, Any]) -> bool:
    """A flag of the command that was added, removed (``new`` None) or given another value."""
    return bool(b.get("added")) or b["new"] is None or b["old"] != b["new"]


def _change(c: Mapping[str, Any]) -> str:
    key, old, new = c["key"], c.get("old"), c.get("new")
    if c.get("added") or (old is None and new is not None):
        return f"{key} {_word(new)} added" if new != "" else f"{key} added"
    if new is None:
        return f"{key} {_word(old)} removed" if old not in (None, "") else f"{key} removed"
    return f"{key} {_word(old)} -> {_word(new)}"


def _word(value: Any) -> str:
    if isinstance(value, str):
        return value if value and value == value.strip() and " " not in value else json.dumps(value)
    return format_value(value)


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

    Every binding is checked here, before anything is written, by ``run --dry-run`` and by a real
    launch alike: ProfileError for a malformed binding, a value that does not fit the key it
    replaces, a preset that cannot carry a knob the ladder may change (a silent no-op would make
    ``fix`` useless), or a contradiction the job would trip over (``conflicts.refuse``);
    UsageError for a missing file or an unknown ``{placeholder}``; InputError for a file that
    does not parse or cannot be edited safely.
    """
    # Here, not at the top: the frameworks' modules read configs through this package.
    from gpudoc.frameworks.registry import (
        arg_preset_names,
        file_layout,
        file_preset,
        file_preset_names,
        named_configs,
        write_args,
    )
    from gpudoc.profiles.schema import ENUMS

    cwd = Path(cwd)
    knobs = dict(profile.knobs)
    bind = dict(profile.bind or {})
    where = str(profile.path) if getattr(profile, "path", None) else "profile"
    check_files_table(bind.get("files") or {}, knobs, {k: v for (t, k), v in ENUMS.items() if t == "train"}, where)
    values = {**knobs, **{k: v for k, v in dict(profile.launch).items() if k in ("nproc_per_node", "nnodes")},
              "world_size": profile.world_size}
    argv = substitute(list(command), values)
    env = env_for(knobs) if profile.bind_env else {}
    parts = parse_command(argv)
    cmd_world = job_world(parts)
    # The batch arithmetic's ranks (DeepSpeed's train_batch_size, LitGPT's global batch): the data-parallel
    # ones, the launcher's world over the profile's pipeline stages and tensor/context ranks.
    world = cmd_world.world_size or profile.world_size
    parallel = profile.world_size // profile.data_parallel_size
    world = world // parallel if world % parallel == 0 else world
    contradictions = launch_contradictions(profile, parts.launcher, cmd_world)
    conflicts: list[str] = []
    notes: list[str] = []
    bindings: list[dict] = []
    results: list[tuple[str, PresetResult]] = []
    files: dict[Path, FileState] = {}
    explicit: set[str] = set()
    bound_in_file: dict[Path, set[str]] = {}
    checked: dict[Path, str] = {}  # each config file a framework's start-up check reads, by its preset
    overridden: set[str] = set()  # knobs on the command line as ``key=value``: they beat the config files
    by = whose(profile)

    def state(path_text: str) -> FileState:
        path = (cwd / path_text) if not Path(path_text).is_absolute() else Path(path_text)
        key = path.resolve()
        if key not in files:
            files[key] = FileState(path, path_text)
        return files[key]

    # 1. Arguments: the profile's own [bind.overrides] and [bind.flags], then the preset's flags, so the
    # preset reads the command as the job will run it (a rung's [bind.flags] can name another --deepspeed JSON).
    args_ed = ArgEdits(argv[parts.args_start:])
    overridden |= apply_overrides(args_ed, bind, knobs) | apply_flags(args_ed, bind, knobs)
    arg_preset = bind.get("args")
    written: PresetResult | None = None
    if arg_preset:
        only = bind.get("args_knobs")  # the knobs that live on the command line; the rest are in files
        arg_knobs = knobs if only is None else {k: v for k, v in knobs.items() if k in only}
        version = profile.job.version if profile.job is not None else None  # the framework's, as its reading found it
        declared = profile.job.declared if profile.job is not None else None
        written = write_args(arg_preset, args_ed, arg_knobs, ArgContext(world, parts.launcher, version, declared))
        if written is None:
            raise ProfileError(f"[bind] args = '{arg_preset}': unknown preset; one of "
                               f"{', '.join(arg_preset_names())}")
        results.append((arg_preset, written))
        overridden |= written.overrides
    else:
        conflicts.extend(unbound_flag_conflicts(argv[parts.args_start:], knobs, by=by))
    explicit |= overridden
    job_args = args_ed.result()  # the script's arguments as the job will run with them
    argv = argv[: parts.args_start] + job_args
    bindings.extend(arg_changes(args_ed))

    # The config files the command names for a framework (a DeepSpeed JSON), read once, from the command
    # the job will run: an override or a flag above can add one, or name another than the command did.
    # A framework that fills a file's "auto" values from its own flags (the HF Trainer, the JSON it is
    # passed): the file keeps them, however the profile binds it (SPEC: "auto" respected).
    named = named_configs(job_args)
    filled = {(cwd / path).resolve() for path, _preset, fills in named if fills}
    # What the framework's own flags carry into those "auto" values at the profile's value (or the job
    # itself, from GPUDOC_<KNOB>: [bind] via_env).
    carried = frozenset(overridden | (written.expressed if written is not None else set())
                        | flags_at_profile_value(job_args, knobs) | set(bind.get("via_env") or ()))

    # A file reached twice (the job's --deepspeed, also in [bind.files]) is bound once, the first way.
    ran: set[tuple[Path, str]] = set()

    def run_file_preset(st: FileState, preset: str, hf_mode: bool) -> None:
        if st.fmt == "sh":
            raise ProfileError(f"[bind.files] {st.label}: a shell script takes an argument preset "
                               f"({', '.join(arg_preset_names())}), not '{preset}'")
        if (st.path.resolve(), preset) in ran:
            return
        ran.add((st.path.resolve(), preset))
        ctx = FileContext(st.label, knobs, world, hf_mode or st.path.resolve() in filled, carried)
        res: FileResult = file_preset(preset).write(st.data, ctx)
        for path, value, knob in res.assignments:
            st.assign(path, value, knob=knob)
        bound_in_file.setdefault(st.path.resolve(), set()).update(res.expressed)
        checked[st.path.resolve()] = preset
        results.append((f"{preset} ({st.label})", res))
        for follow_path, follow_preset, follow_hf in res.follow:
            run_file_preset(state(follow_path), follow_preset, follow_hf)

    # The files the preset's framework reads from its flags.
    for follow_path, follow_preset, follow_filled in written.follow if written is not None else []:
        run_file_preset(state(follow_path), follow_preset, follow_filled)

    # 2. Files named in the profile.
    for path_text, spec in dict(bind.get("files") or {}).items():
        st = state(path_text)
        preset, mapping = _file_spec(path_text, spec)
        if st.fmt == "sh":
            res = _shell_file(st, preset, mapping, knobs, world)
            if preset:
                results.append((f"{preset} ({st.label})", res))
            explicit.update(mapping)
            for follow_path, follow_preset, follow_filled in res.follow:
                run_file_preset(state(follow_path), follow_preset, follow_filled)
            continue
        if preset:
            if preset not in file_preset_names():
                raise ProfileError(f"[bind.files] {path_text}: unknown preset '{preset}'; one of "
                                   f"{', '.join(file_preset_names())}")
            run_file_preset(st, preset, hf_mode=False)
        label = f"{where}: [bind.files.\"{path_text}\"]"
        for knob, spec_of_knob in mapping.items():
            for target in targets(label, knob, spec_of_knob):
                _assign_checked(st, target, knob, knobs[knob], label)
            explicit.add(knob)
            bound_in_file.setdefault(st.path.resolve(), set()).add(knob)
        if not preset:
            conflicts.extend(unbound_file_conflicts(st, knobs, bound_in_file.get(st.path.resolve(), set()),
                                                    overridden=frozenset(overridden), by=by))
            layout = file_layout(st.data, st.path.suffix.lower())
            if layout is not None:
                checked[st.path.resolve()] = layout

    # 3. A config file the command names for a framework (a DeepSpeed JSON) that nothing binds: check, do not edit.
    for path_text, named_preset, _fills in named:
        if Path(cwd / path_text).is_file() and (cwd / path_text).resolve() not in files:
            st = state(path_text)
            checked[st.path.resolve()] = named_preset
            if not arg_preset:
                conflicts.extend(unbound_file_conflicts(st, knobs, set(), preset=named_preset, by=by))

    # 4. Contradictions stop here, before anything is written.
    for path, preset_name in sorted(checked.items()):
        check, st = file_preset(preset_name).startup_check, files[path]
        found = check(st.data, st.label, knobs, world) if check is not None and st.data is not None else None
        if found:
            contradictions.append(found)
    refuse(profile, contradictions)

    # 5. Every ladder knob must reach the job when presets are in use.
    for _, res in results:
        notes.extend(res.notes)
        conflicts.extend(res.conflicts)
    if results or not profile.bind_env:
        # With presets, or with no GPUDOC_* variables at all, every declared ladder knob needs a place
        # in the job; knobs the user says the job reads from GPUDOC_<KNOB> reach it through the environment.
        via_env = set(bind.get("via_env", ())) if profile.bind_env else set()
        for knob in sorted(via_env - set(knobs)):
            close = difflib.get_close_matches(knob, list(knobs), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ProfileError(f"{profile.path}: bind.via_env: '{knob}' is not a knob in [train]{hint}")
        require_expressed(profile, knobs, results, explicit | via_env | _placeholder_knobs(list(command)))

    for st in files.values():
        bindings.extend(st.bindings)
    edits = [e for e in (st.edit() for st in files.values()) if e is not None]
    return BindPlan(argv, env, edits, _dedupe(conflicts), _dedupe(notes), bindings)


def _assign_checked(st: FileState, target: Target, knob: str, value: Any, label: str) -> None:
    """An explicit binding: through its map, type-checked against the value it replaces."""
    new = target.value_for(knob, value, label)
    old = st.current(target.path)
    if old is MISSING:
        _refuse_likely_typo(st, target)
    st.assign(target.path, fit(old, new, file=st.label, key=target.text, knob=knob), knob=knob, key=target.text)


def _refuse_likely_typo(st: FileState, target: Target) -> None:
    """A key that is missing beside one spelled almost the same is a typo, not a key to add."""
    parent = st.current(target.path[:-1]) if len(target.path) > 1 else st.data
    if isinstance(parent, Mapping):
        close = difflib.get_close_matches(target.path[-1], [str(k) for k in parent], n=1, cutoff=0.8)
        if close:
            raise ProfileError(f"{st.label}: {target.text} is not in the file (did you mean "
                               f"'{'.'.join((*target.path[:-1], close[0]))}'?); gpudoc would add it as a new key")


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _file_spec(path_text: str, spec: Any) -> tuple[str | None, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        return spec.get("preset"), {k: v for k, v in spec.items() if k != "preset"}
    raise ProfileError(f"[bind.files] \"{path_text}\": expected a preset name or a table of knob = \"key.path\"")


def _shell_file(st: FileState, preset: str | None, mapping: Mapping[str, Any], knobs: Mapping[str, Any],
                world: int) -> PresetResult:
    from gpudoc.frameworks.registry import arg_preset_names, write_args

    if preset and preset not in arg_preset_names():
        raise ProfileError(f"[bind.files] {st.label}: unknown argument preset '{preset}'; one of "
                           f"{', '.join(arg_preset_names())}")
    words = shell.main_command(shell.tokenize(st.text, st.label))
    parts = parse_command([w.value for w in words])
    ed = ArgEdits([w.value for w in words[parts.args_start:]])
    res = (write_args(preset, ed, knobs, ArgContext(world, parts.launcher)) if preset else None) or PresetResult()
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
    by_flag = {flag: knob for knob, flag in mapping.items()}
    for change in arg_changes(ed, st.label):
        change["knob"] = by_flag.get(change["key"], change["knob"])
        st.bindings.append(change)
        st.changes.append({k: change[k] for k in ("key", "old", "new", "added")})
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
