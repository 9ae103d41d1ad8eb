"""`gpudoc completions bash|zsh|fish`, and the generator behind the scripts in ``completions/``.

The scripts are generated from the live plumbum application (every subcommand, every switch,
whether it takes a value), so they cannot drift from the CLI without a test noticing
(tests/shell/test_drift.py). What the CLI cannot say by itself -- that ``-p`` takes a profile
name, that ``fix`` and ``logs`` take a run id, that ``run`` takes a command line -- lives in the
small tables below. Regenerate after changing a switch:

    python -m gpudoc.commands.completions --write

At TAB time the scripts never start Python for names: profile names and run ids are shell globs
over the same directories ``gpudoc.shellcomplete`` lists (a Python start costs ~100 ms a TAB).
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from gpudoc.errors import UsageError

SHELLS = ("bash", "zsh", "fish")
SCRIPT_NAMES = {"bash": "gpudoc", "zsh": "_gpudoc", "fish": "gpudoc.fish"}
# Where pyproject's data-files put them under the install prefix.
INSTALLED_DIRS = {
    "bash": "share/bash-completion/completions",
    "zsh": "share/zsh/site-functions",
    "fish": "share/fish/vendor_completions.d",
}

# What a switch's value is, by any of its names (plumbum only knows the Python type).
SWITCH_VALUES = {
    "profile": "profiles",
    "snapshot": "files",
    "log": "files",
    "config": "files",
    "output": "files",
    "only": "checks",
    "skip": "checks",
    "python": "files",
}
# What positional arguments are, per command path; a trailing "*" repeats the last kind.
# "command" hands the rest of the line to the shell's own completion (gpudoc run -- COMMAND).
POSITIONALS = {
    ("run",): ("command",),
    ("fix",): ("runs*",),  # several runs of one job (one per node)
    ("logs",): ("runs",),
    ("completions",): ("shells",),
    ("profile", "show"): ("profiles",),
    ("profile", "new"): ("free",),
}
# By parameter name of main(), for commands not in POSITIONALS.
_PARAM_KINDS = {
    "run_id": "runs",
    "run": "runs",
    "shell": "shells",
    "profile": "profiles",
    "command": "command",
    "argv": "command",
    "file": "files",
    "path": "files",
    "log": "files",
}


@dataclass(frozen=True)
class Switch:
    names: tuple[str, ...]  # with their dashes: ("-p", "--profile")
    value: str | None  # None: a flag; else profiles|runs|files|dirs|checks|choice|free
    choices: tuple[str, ...] = ()
    help: str = ""
    repeat: bool = False
    csv: bool = False  # the value is a comma-separated list of choices (--only driver,env)
    argname: str = ""  # what --help calls the value: N, NAME, FILE

    @property
    def long_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n.startswith("--"))

    @property
    def short_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if not n.startswith("--"))


@dataclass
class Node:
    path: tuple[str, ...]
    summary: str
    switches: list[Switch]
    positionals: tuple[str, ...] = ()
    variadic: bool = False
    children: dict[str, Node] = field(default_factory=dict)

    def walk(self):
        yield self
        for child in self.children.values():
            yield from child.walk()

    @property
    def takes_command(self) -> bool:
        return "command" in self.positionals


def _one_line(text: str | None) -> str:
    text = inspect.cleandoc(text or "").strip()
    first = text.splitlines()[0] if text else ""
    return first.rstrip(".").strip()


def _check_ids() -> tuple[str, ...]:
    """Check groups and ids, for --only/--skip (fixed at generation time, like the switches)."""
    from gpudoc.checks import CATALOGUE

    groups = [getattr(check, "group", None) for check in CATALOGUE]
    ids = [getattr(check, "id", None) for check in CATALOGUE]
    return tuple(dict.fromkeys(str(x) for x in [*groups, *ids] if x))


def _switch(info, checks: tuple[str, ...]) -> Switch:
    from plumbum import cli

    names = tuple(("-" if len(n) == 1 else "--") + n for n in info.names)
    value = None
    choices: tuple[str, ...] = ()
    csv = False
    if info.argtype is not None:
        hinted = [SWITCH_VALUES[n] for n in info.names if n in SWITCH_VALUES]
        if hinted:
            value = hinted[0]
        elif isinstance(info.argtype, cli.Set):
            value = "choice"
            choices = tuple(str(v) for v in info.argtype.values)
        elif info.argtype in (cli.ExistingFile, cli.NonexistentPath) or info.argtype is Path:
            value = "files"
        elif info.argtype is cli.ExistingDirectory:
            value = "dirs"
        else:
            value = "free"
        if value == "checks":
            value, choices, csv = ("choice", checks, True) if checks else ("free", (), False)
    argname = info.argname if info.argname and info.argname != "VALUE" else ""
    return Switch(names=names, value=value, choices=choices, help=_one_line(info.help),
                  repeat=bool(info.list), csv=csv, argname=argname)


def _positionals(path: tuple[str, ...], app_cls) -> tuple[tuple[str, ...], bool]:
    if path in POSITIONALS:
        kinds = POSITIONALS[path]
        variadic = kinds[-1] == "command" or kinds[-1].endswith("*")
        return tuple(k.rstrip("*") for k in kinds), variadic
    try:
        params = list(inspect.signature(app_cls.main).parameters.values())[1:]
    except (TypeError, ValueError):
        return (), False
    kinds = []
    variadic = False
    for param in params:
        kinds.append(_PARAM_KINDS.get(param.name, "free"))
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            variadic = True
    return tuple(kinds), variadic


def command_tree(app_cls=None, prog: str = "gpudoc") -> Node:
    """The live command line as data: every (nested) subcommand and its switches."""
    if app_cls is None:
        from gpudoc.cli.app import Gpudoc as app_cls
    checks = _check_ids()
    return _node(app_cls, (), prog, checks)


def _node(app_cls, path: tuple[str, ...], prog: str, checks: tuple[str, ...]) -> Node:
    inst = app_cls(" ".join((prog, *path)))
    seen: list = []
    for info in inst._switches_by_name.values():
        if info not in seen:
            seen.append(info)
    # The command's own switches first, plumbum's meta-switches (help, version) last.
    seen.sort(key=lambda info: info.group == "Meta-switches")
    switches = [_switch(info, checks) for info in seen]
    children = {}
    for name, sub in inst._subcommands.items():
        children[name] = _node(sub.get(), (*path, name), prog, checks)
    positionals, variadic = ((), False) if children else _positionals(path, app_cls)
    summary = _one_line(getattr(app_cls, "DESCRIPTION", None) or app_cls.__doc__)
    return Node(path=path, summary=summary, switches=switches, positionals=positionals,
                variadic=variadic, children=children)


# --------------------------------------------------------------------------------------------
# Rendering. Templates use @@NAME@@ markers: shell code is full of $ and braces.

_HEADER = """\
# Generated from gpudoc's own command line by `python -m gpudoc.commands.completions --write`:
# change the CLI (or gpudoc/commands/completions.py) and regenerate rather than editing this file.
# Print it with `gpudoc completions {shell}`."""


def _fill(template: str, **parts: str) -> str:
    for key, value in parts.items():
        template = template.replace(f"@@{key}@@", value)
    if "@@" in template:  # a bug in the generator, caught by its drift test
        raise RuntimeError("unfilled template marker in a completion script")
    return template


def _value_word(sw: Switch) -> str:
    if sw.value == "choice":
        return ("csv:" if sw.csv else "choice:") + " ".join(sw.choices)
    return sw.value or ""


def _pos_word(node: Node) -> str:
    words = list(node.positionals)
    if node.variadic and words:
        words[-1] += "*"
    return " ".join(words)


def render_bash(tree: Node) -> str:
    spec_cases = []
    value_cases = []
    for node in tree.walk():
        key = " ".join(node.path)
        names = [n for sw in node.switches for n in sw.names]
        if node.takes_command:
            names.append("--")
        argsw = [n for sw in node.switches if sw.value for n in sw.names]
        spec_cases.append(
            f"        '{key}')\n"
            f"            _gpudoc_sw='{' '.join(names)}'\n"
            f"            _gpudoc_argsw='{' '.join(argsw)}'\n"
            f"            _gpudoc_subs='{' '.join(node.children)}'\n"
            f"            _gpudoc_pos='{_pos_word(node)}'\n"
            f"            ;;"
        )
        for sw in node.switches:
            if sw.value:
                pattern = "|".join(f"'{key}|{n}'" for n in sw.names)
                value_cases.append(f"        {pattern}) REPLY='{_value_word(sw)}' ;;")
    return _fill(_BASH, HEADER=_HEADER.format(shell="bash"), SPECS="\n".join(spec_cases),
                 VALUES="\n".join(value_cases))


def _zsh_quote_desc(text: str) -> str:
    return text.replace("'", "'\\''").replace("[", "\\[").replace("]", "\\]")


def _zsh_action(sw: Switch) -> str:
    label = sw.argname or (sw.long_names[0].lstrip("-") if sw.long_names else "value")
    return {
        "profiles": ":profile:_gpudoc_profiles",
        "runs": ":run id:_gpudoc_runs",
        "files": ":file:_files",
        "dirs": ":directory:_files -/",
        "choice": (f":{label}:_values -s , {label} {' '.join(sw.choices)}" if sw.csv
                   else f":{label}:({' '.join(sw.choices)})"),
    }.get(sw.value or "", f":{label}: ")


_ZSH_POSITIONAL = {
    "runs": "run id:_gpudoc_runs",
    "profiles": "profile:_gpudoc_profiles",
    "shells": "shell:(bash zsh fish)",
    "files": "file:_files",
    "free": "value: ",
}


def _zsh_function_name(path: tuple[str, ...]) -> str:
    return "_gpudoc__" + "_".join(p.replace("-", "_") for p in path) if path else "_gpudoc__root"


def _zsh_node(node: Node) -> str:
    specs = []
    for sw in node.switches:
        desc = f"[{_zsh_quote_desc(sw.help)}]" if sw.help else ""
        excl = "*" if sw.repeat else ("(" + " ".join(sw.names) + ")" if len(sw.names) > 1 else "")
        for name in sw.names:
            suffix = ("=" if name.startswith("--") else "+") if sw.value else ""
            action = _zsh_action(sw) if sw.value else ""
            specs.append(f"'{excl}{name}{suffix}{desc}{action}'")
    lines = [f"{_zsh_function_name(node.path)}() {{"]
    if node.children:
        items = " ".join(
            f"'{name}:{_zsh_quote_desc(child.summary)}'" for name, child in node.children.items()
        )
        ctx = "-".join(("gpudoc", *node.path))
        lines += [
            "    local curcontext=$curcontext state state_descr line ret=1",
            "    typeset -A opt_args",
            "    _arguments -C \\",
            *(f"        {spec} \\" for spec in specs),
            "        ': :->command' \\",
            "        '*:: :->args' && ret=0",
            "    case $state in",
            "        command)",
            f"            local -a subcommands=({items})",
            f"            _describe -t commands '{ctx} command' subcommands && ret=0",
            "            ;;",
            "        args)",
            f"            curcontext=${{curcontext%:*:*}}:{ctx}-$words[1]:",
            "            case $words[1] in",
        ]
        for name, child in node.children.items():
            lines.append(f"                {name}) {_zsh_function_name(child.path)} && ret=0 ;;")
        lines += ["            esac", "            ;;", "    esac", "    return ret", "}"]
        return "\n".join(lines)
    positional = []
    if node.takes_command:
        lines += [
            "    # After `--` the rest is the job's own command line: the shell completes it.",
            "    local i=${words[(i)--]}",
            "    if (( i < CURRENT )); then",
            "        shift $i words",
            "        (( CURRENT -= i ))",
            "        _normal",
            "        return",
            "    fi",
        ]
        positional.append("'*:: :_normal'")
    else:
        for index, kind in enumerate(node.positionals, start=1):
            spec = _ZSH_POSITIONAL.get(kind, "value: ")
            last = index == len(node.positionals)
            positional.append(f"'*:{spec}'" if (last and node.variadic) else f"'{index}:{spec}'")
    lines += [
        "    _arguments -s -S \\",
        *(f"        {spec} \\" for spec in specs + positional[:-1]),
        f"        {positional[-1]}" if positional else "        && return",
    ]
    if not positional:
        lines[-2] = lines[-2].rstrip(" \\")
        lines.pop()
    lines.append("}")
    return "\n".join(lines)


def render_zsh(tree: Node) -> str:
    functions = "\n\n".join(_zsh_node(node) for node in tree.walk())
    return _fill(_ZSH, HEADER=_HEADER.format(shell="zsh"), FUNCTIONS=functions)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_FISH_VALUE = {
    "profiles": "-x -a '(__gpudoc_profiles)'",
    "runs": "-x -a '(__gpudoc_runs)'",
    "files": "-r -F",
    "dirs": "-x -a '(__fish_complete_directories)'",
    "free": "-x",
}
_FISH_POSITIONAL = {
    "runs": "(__gpudoc_runs)",
    "profiles": "(__gpudoc_profiles)",
    "shells": "bash zsh fish",
}


def render_fish(tree: Node) -> str:
    argsw_cases = []
    subs_cases = []
    pos_cases = []
    lines = []
    for node in tree.walk():
        key = " ".join(node.path)
        argsw = [n for sw in node.switches if sw.value for n in sw.names]
        argsw_cases.append(f"        case {_fish_quote(key)}\n            echo {_fish_quote(' '.join(argsw))}")
        subs_cases.append(f"        case {_fish_quote(key)}\n            echo {_fish_quote(' '.join(node.children))}")
        pos_cases.append(f"        case {_fish_quote(key)}\n            echo {_fish_quote(_pos_word(node))}")
        at = f"-n {_fish_quote('__gpudoc_at ' + _fish_quote(key))}"
        for name, child in node.children.items():
            lines.append(f"complete -c gpudoc {at} -a {name} -d {_fish_quote(child.summary)}")
        for sw in node.switches:
            opts = " ".join([*(f"-s {n[1:]}" for n in sw.short_names),
                             *(f"-l {n[2:]}" for n in sw.long_names)])
            if sw.value == "choice":
                value = f"-x -a {_fish_quote(' '.join(sw.choices))}"
            else:
                value = _FISH_VALUE.get(sw.value or "", "")
            desc = f" -d {_fish_quote(sw.help)}" if sw.help else ""
            lines.append(f"complete -c gpudoc {at} {opts}{' ' + value if value else ''}{desc}")
        for index, kind in enumerate(node.positionals):
            if kind == "command":
                continue
            cond = f"__gpudoc_pos {_fish_quote(key)} {index}"
            if node.variadic and index == len(node.positionals) - 1:
                cond = f"__gpudoc_pos {_fish_quote(key)} {index}+"
            if kind == "files":
                lines.append(f"complete -c gpudoc -n {_fish_quote(cond)} -F")
            elif kind in _FISH_POSITIONAL:
                lines.append(f"complete -c gpudoc -n {_fish_quote(cond)} -x -a "
                             f"{_fish_quote(_FISH_POSITIONAL[kind])}")
        if node.takes_command:
            lines.append(f"complete -c gpudoc -n {_fish_quote('__gpudoc_at ' + _fish_quote(key))} "
                         f"-a -- -d 'end of gpudoc switches: the command follows'")
    return _fill(_FISH, HEADER=_HEADER.format(shell="fish"), ARGSW="\n".join(argsw_cases),
                 SUBS="\n".join(subs_cases), POS="\n".join(pos_cases), COMPLETES="\n".join(lines))


RENDERERS = {"bash": render_bash, "zsh": render_zsh, "fish": render_fish}


def render(shell: str, tree: Node | None = None) -> str:
    return RENDERERS[shell](tree or command_tree())


# --------------------------------------------------------------------------------------------
# Finding the shipped scripts.


def _checkout_dir() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "completions"


def script_path(shell: str) -> Path | None:
    """The script a checkout or an install carries; None when neither is on disk."""
    candidates = [
        _checkout_dir() / SCRIPT_NAMES[shell],
        Path(sys.prefix) / INSTALLED_DIRS[shell] / SCRIPT_NAMES[shell],
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def script_text(shell: str) -> str:
    if shell not in SHELLS:
        raise UsageError(f"gpudoc completions: unknown shell '{shell}' (choose bash, zsh or fish)")
    path = script_path(shell)
    if path is not None:
        return path.read_text(encoding="utf-8")
    # An install that dropped the data files (some wheels, zipapps): the CLI itself is the
    # source the files are generated from, so generate.
    return render(shell)


def print_completions(shell: str, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    out.write(script_text(shell))
    out.flush()
    return 0


def write_scripts(directory: Path | None = None) -> list[Path]:
    directory = directory or _checkout_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tree = command_tree()
    written = []
    for shell in SHELLS:
        path = directory / SCRIPT_NAMES[shell]
        text = render(shell, tree)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        written.append(path)
    return written


# --------------------------------------------------------------------------------------------
# Templates.

_BASH = r"""# bash completion for gpudoc                                  -*- shell-script -*-
@@HEADER@@
#
# Install: copy to ~/.local/share/bash-completion/completions/gpudoc (bash-completion loads it
# on first use), or `source <(gpudoc completions bash)` in ~/.bashrc.

# Where the gpudoc being completed keeps its shipped profiles: a checkout (bin/gpudoc beside
# profiles/), an install prefix (bin/gpudoc beside share/gpudoc/profiles), else the console
# script's own Python says (once). Cached per shell, keyed by the executable.
_gpudoc_shipped_dir() {
    local exe=$1 real root line dir=
    if [[ $exe != */* ]]; then
        exe=$(type -P -- "$exe" 2>/dev/null) || exe=$1
    elif [[ $exe != /* ]]; then
        exe=$PWD/$exe
    fi
    if [[ $exe == "${_gpudoc_shipped_key-}" ]]; then
        REPLY=$_gpudoc_shipped_val
        return
    fi
    real=$(readlink -f -- "$exe" 2>/dev/null) || real=$exe
    root=${real%/*}
    root=${root%/*}
    if [[ -d $root/profiles && -d $root/gpudoc ]]; then
        dir=$root/profiles
    elif [[ -d $root/share/gpudoc/profiles ]]; then
        dir=$root/share/gpudoc/profiles
    elif [[ -d $root/../profiles && -d $root/../gpudoc ]]; then
        dir=${root%/*}/profiles  # the checkout's .venv that bin/gpudoc made (editable install)
    elif [[ -f $real ]] && IFS= read -r line <"$real" && [[ $line == '#!'*python* ]]; then
        local -a py
        read -r -a py <<<"${line#'#!'}"
        dir=$("${py[@]}" -m gpudoc.shellcomplete shipped-dir 2>/dev/null)
    fi
    _gpudoc_shipped_key=$exe
    _gpudoc_shipped_val=$dir
    REPLY=$dir
}

# Profile names, as `gpudoc -p NAME` looks them up (gpudoc/profiles/loader.py search_dirs).
_gpudoc_profiles() {
    local d f
    local -a dirs=(./.gpudoc/profiles "${XDG_CONFIG_HOME:-$HOME/.config}/gpudoc/profiles")
    _gpudoc_shipped_dir "$1"
    [[ -n $REPLY ]] && dirs+=("$REPLY")
    _gpudoc_names=()
    for d in "${dirs[@]}"; do
        for f in "$d"/*.toml; do
            [[ -f $f ]] || continue
            f=${f##*/}
            _gpudoc_names+=("${f%.toml}")
        done
    done
}

# Run ids: directories of $GPUDOC_HOME/runs (default ./.gpudoc/runs) that hold a run.json.
_gpudoc_runs() {
    local f
    _gpudoc_names=()
    for f in "${GPUDOC_HOME:-./.gpudoc}"/runs/*/run.json; do
        [[ -f $f ]] || continue
        f=${f%/run.json}
        _gpudoc_names+=("${f##*/}")
    done
}

# Per command path: its switches, those taking a value, its subcommands, its positionals.
_gpudoc_spec() {
    case $1 in
@@SPECS@@
    esac
}

# What the value of switch $2 of command path $1 is.
_gpudoc_value_kind() {
    case "$1|$2" in
@@VALUES@@
        *) REPLY= ;;
    esac
}

_gpudoc_values() {
    case $1 in
        profiles)
            # -p also takes a file: ./gpudoc.toml, ../shared/a.toml
            if [[ $cur == */* || $cur == .* ]]; then
                _gpudoc_values files
                return
            fi
            _gpudoc_profiles "${COMP_WORDS[0]}"
            COMPREPLY=($(compgen -W "${_gpudoc_names[*]}" -- "$cur"))
            ;;
        runs)
            _gpudoc_runs
            COMPREPLY=($(compgen -W "${_gpudoc_names[*]}" -- "$cur"))
            ;;
        shells) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
        files)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
            ;;
        dirs)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -d -- "$cur"))
            ;;
        choice:*) COMPREPLY=($(compgen -W "${1#choice:}" -- "$cur")) ;;
        csv:*)
            # --only driver,env.<TAB>: complete the last item, keep the ones before it
            local done=
            [[ $cur == *,* ]] && done=${cur%,*},
            COMPREPLY=($(compgen -P "$done" -W "${1#csv:}" -- "${cur##*,}"))
            compopt -o nospace 2>/dev/null
            ;;
        *) COMPREPLY=() ;;
    esac
}

# The job's command line starts at word $1: complete it as the shell would on its own.
_gpudoc_command_offset() {
    if declare -F _command_offset >/dev/null 2>&1; then
        _command_offset "$1"
        return
    fi
    # Without bash-completion: command names for the first word, files after it.
    if ((COMP_CWORD == $1)); then
        COMPREPLY=($(compgen -c -- "$cur"))
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

_gpudoc_pos_kind() {
    local -a kinds=($_gpudoc_pos)
    local n=${#kinds[@]}
    REPLY=
    ((n == 0)) && return
    if (($1 < n)); then
        REPLY=${kinds[$1]}
    elif [[ ${kinds[n - 1]} == *'*' ]]; then
        REPLY=${kinds[n - 1]}
    fi
    REPLY=${REPLY%'*'}
}

_gpudoc() {
    local cur=${COMP_WORDS[COMP_CWORD]} path= w opt= i npos=0
    local _gpudoc_sw _gpudoc_argsw _gpudoc_subs _gpudoc_pos
    local -a _gpudoc_names
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        _gpudoc_spec "$path"
        if [[ $w == -- ]]; then
            _gpudoc_pos_kind 0
            if [[ $REPLY == command ]]; then
                _gpudoc_command_offset $((i + 1))
                return
            fi
        elif [[ $w == -?* ]]; then
            # a switch; skip its value ("--profile x", or "--profile = x" as bash splits at '=')
            if [[ " $_gpudoc_argsw " == *" $w "* ]]; then
                if [[ ${COMP_WORDS[i + 1]} == = ]]; then ((i += 2)); else ((i += 1)); fi
            fi
        elif [[ -n $_gpudoc_subs && " $_gpudoc_subs " == *" $w "* ]]; then
            path=${path:+$path }$w
            npos=0
        elif [[ $w != = ]]; then
            _gpudoc_pos_kind $npos
            if [[ $REPLY == command ]]; then
                _gpudoc_command_offset "$i"
                return
            fi
            ((npos++))
        fi
    done
    _gpudoc_spec "$path"

    # The value of a switch: "-p <TAB>", "--profile=<TAB>" (bash splits at '=').
    if [[ $cur == = ]]; then
        opt=${COMP_WORDS[COMP_CWORD - 1]}
        cur=
    elif [[ ${COMP_WORDS[COMP_CWORD - 1]} == = ]]; then
        opt=${COMP_WORDS[COMP_CWORD - 2]}
    elif ((COMP_CWORD > 1)); then
        opt=${COMP_WORDS[COMP_CWORD - 1]}
    fi
    if [[ -n $opt && " $_gpudoc_argsw " == *" $opt "* ]]; then
        _gpudoc_value_kind "$path" "$opt"
        _gpudoc_values "$REPLY"
        return
    fi

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$_gpudoc_sw" -- "$cur"))
    elif [[ -n $_gpudoc_subs ]]; then
        COMPREPLY=($(compgen -W "$_gpudoc_subs" -- "$cur"))
    else
        _gpudoc_pos_kind $npos
        if [[ $REPLY == command ]]; then
            _gpudoc_command_offset "$COMP_CWORD"
        else
            _gpudoc_values "$REPLY"
        fi
    fi
}

complete -F _gpudoc gpudoc
"""

_ZSH = r"""#compdef gpudoc
@@HEADER@@
#
# Install: put this file (named _gpudoc) in a directory of $fpath before compinit runs, e.g.
# ~/.zfunc with `fpath=(~/.zfunc $fpath)` in ~/.zshrc.

# Where the gpudoc being completed keeps its shipped profiles (see the bash script); cached.
(( $+functions[_gpudoc_shipped_dir] )) ||
_gpudoc_shipped_dir() {
    local exe=${_gpudoc_exe:-gpudoc} real root line dir=
    if [[ $exe != */* ]]; then
        exe=${commands[$exe]:-$exe}
    fi
    exe=${exe:a}
    if [[ $exe == ${_gpudoc_shipped_key-} ]]; then
        REPLY=$_gpudoc_shipped_val
        return
    fi
    real=${exe:A}
    root=${real:h:h}
    if [[ -d $root/profiles && -d $root/gpudoc ]]; then
        dir=$root/profiles
    elif [[ -d $root/share/gpudoc/profiles ]]; then
        dir=$root/share/gpudoc/profiles
    elif [[ -d $root:h/profiles && -d $root:h/gpudoc ]]; then
        dir=$root:h/profiles  # the checkout's .venv that bin/gpudoc made (editable install)
    elif [[ -f $real ]] && IFS= read -r line <$real && [[ $line == '#!'*python* ]]; then
        dir=$(${=${line#\#!}} -m gpudoc.shellcomplete shipped-dir 2>/dev/null)
    fi
    typeset -g _gpudoc_shipped_key=$exe _gpudoc_shipped_val=$dir
    REPLY=$dir
}

# Profile names, as `gpudoc -p NAME` looks them up; -p also takes a .toml file.
(( $+functions[_gpudoc_profiles] )) ||
_gpudoc_profiles() {
    local -a dirs names expl
    local d
    if [[ $PREFIX == */* || $PREFIX == .* ]]; then
        _files -g '*.toml(-.)'
        return
    fi
    dirs=(./.gpudoc/profiles ${XDG_CONFIG_HOME:-$HOME/.config}/gpudoc/profiles)
    _gpudoc_shipped_dir
    [[ -n $REPLY ]] && dirs+=($REPLY)
    for d in $dirs; do
        names+=($d/*.toml(N-.:t:r))
    done
    _wanted profiles expl 'profile' compadd -a - names
}

# Run ids: directories of $GPUDOC_HOME/runs (default ./.gpudoc/runs) that hold a run.json.
(( $+functions[_gpudoc_runs] )) ||
_gpudoc_runs() {
    local -a ids expl
    ids=(${GPUDOC_HOME:-./.gpudoc}/runs/*/run.json(N-.:h:t))
    _wanted runs expl 'run id' compadd -a - ids
}

@@FUNCTIONS@@

_gpudoc() {
    local _gpudoc_exe=$words[1]
    _gpudoc__root "$@"
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    # autoloaded from $fpath by compinit
    _gpudoc "$@"
else
    # sourced directly
    compdef _gpudoc gpudoc
fi
"""

_FISH = r"""# fish completion for gpudoc
@@HEADER@@
#
# Install: copy to ~/.config/fish/completions/gpudoc.fish (fish loads it on first use).

complete -c gpudoc -e

# Where the gpudoc being completed keeps its shipped profiles (see the bash script); cached.
function __gpudoc_shipped_dir
    set -l exe (command -s gpudoc)
    test -n "$exe"; or return
    if test "$exe" = "$__gpudoc_shipped_key"
        printf '%s\n' $__gpudoc_shipped_val
        return
    end
    set -l real (path resolve -- $exe 2>/dev/null; or realpath -- $exe 2>/dev/null; or echo $exe)
    set -l root (dirname (dirname $real[1]))
    set -l dir
    if test -d $root/profiles -a -d $root/gpudoc
        set dir $root/profiles
    else if test -d $root/share/gpudoc/profiles
        set dir $root/share/gpudoc/profiles
    else if test -d (dirname $root)/profiles -a -d (dirname $root)/gpudoc
        # the checkout's .venv that bin/gpudoc made (editable install)
        set dir (dirname $root)/profiles
    else if test -f $real[1]
        read -l line <$real[1]
        if string match -q -- '#!*python*' $line
            set -l py (string split ' ' -- (string sub -s 3 -- $line))
            set dir ($py -m gpudoc.shellcomplete shipped-dir 2>/dev/null)
        end
    end
    set -g __gpudoc_shipped_key $exe
    set -g __gpudoc_shipped_val $dir
    printf '%s\n' $dir
end

# Profile names, as `gpudoc -p NAME` looks them up (gpudoc/profiles/loader.py search_dirs).
function __gpudoc_profiles
    set -l config $XDG_CONFIG_HOME
    test -n "$config"; or set config ~/.config
    set -l dirs ./.gpudoc/profiles $config/gpudoc/profiles (__gpudoc_shipped_dir)
    for d in $dirs
        for f in $d/*.toml
            test -f $f; and string replace -r '^.*/(.*)\.toml$' '$1' -- $f
        end
    end
end

# Run ids: directories of $GPUDOC_HOME/runs (default ./.gpudoc/runs) that hold a run.json.
function __gpudoc_runs
    set -l home $GPUDOC_HOME
    test -n "$home"; or set home ./.gpudoc
    for f in $home/runs/*/run.json
        test -f $f; and string replace -r '^.*/([^/]*)/run\.json$' '$1' -- $f
    end
end

function __gpudoc_argsw
    switch $argv[1]
@@ARGSW@@
    end
end

function __gpudoc_subs
    switch $argv[1]
@@SUBS@@
    end
end

function __gpudoc_poskinds
    switch $argv[1]
@@POS@@
    end
end

# Reads the words before the cursor into __gpudoc_path (the command path, "profile show"),
# __gpudoc_npos (positional words so far) and __gpudoc_cmd (where the job's command line starts,
# 0 before it).
function __gpudoc_parse
    # fish asks every condition below on each TAB: parse the line once
    set -l line (commandline -pc)
    if set -q __gpudoc_parsed; and test "$__gpudoc_parsed" = "$line"
        return
    end
    set -g __gpudoc_parsed $line
    set -l tokens (commandline -opc)
    set -g __gpudoc_path ''
    set -g __gpudoc_npos 0
    set -g __gpudoc_cmd 0
    set -l argsw (string split ' ' -- (__gpudoc_argsw ''))
    set -l subs (string split ' ' -- (__gpudoc_subs ''))
    set -l kinds (string split ' ' -- (__gpudoc_poskinds ''))
    set -l i 2
    set -l n (count $tokens)
    while test $i -le $n
        set -l t $tokens[$i]
        if test "$t" = --
            if string match -q 'command*' -- $kinds[1]
                set -g __gpudoc_cmd (math $i + 1)
                return
            end
        else if string match -q -- '-?*' $t
            contains -- $t $argsw; and set i (math $i + 1)
        else if test -n "$subs[1]"; and contains -- $t $subs
            set -g __gpudoc_path (string trim -- "$__gpudoc_path $t")
            set argsw (string split ' ' -- (__gpudoc_argsw $__gpudoc_path))
            set subs (string split ' ' -- (__gpudoc_subs $__gpudoc_path))
            set kinds (string split ' ' -- (__gpudoc_poskinds $__gpudoc_path))
            set -g __gpudoc_npos 0
        else
            if string match -q 'command*' -- $kinds[1]
                set -g __gpudoc_cmd $i
                return
            end
            set -g __gpudoc_npos (math $__gpudoc_npos + 1)
        end
        set i (math $i + 1)
    end
end

# True at command path $argv[1], before any job command line.
function __gpudoc_at
    __gpudoc_parse
    test $__gpudoc_cmd -eq 0 -a "$__gpudoc_path" = "$argv[1]"
end

# True at command path $argv[1] when $argv[2] positionals came before ("N+" for N or more).
function __gpudoc_pos
    __gpudoc_at $argv[1]; or return
    set -l want (string replace '+' '' -- $argv[2])
    if string match -q '*+' -- $argv[2]
        test $__gpudoc_npos -ge $want
    else
        test $__gpudoc_npos -eq $want
    end
end

# After `gpudoc run --`: the job's own command line, completed as fish would on its own.
function __gpudoc_in_command
    __gpudoc_parse
    test $__gpudoc_cmd -gt 0
end

function __gpudoc_complete_command
    __gpudoc_parse
    set -l tokens (commandline -opc)
    set -l words
    if test $__gpudoc_cmd -le (count $tokens)
        set words (string escape -- $tokens[$__gpudoc_cmd..-1])
    end
    complete -C (string join ' ' -- $words (commandline -ct))
end

complete -c gpudoc -f
complete -c gpudoc -n __gpudoc_in_command -x -a '(__gpudoc_complete_command)'
@@COMPLETES@@
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        for path in write_scripts():
            print(path)
        return 0
    sys.stderr.write("usage: python -m gpudoc.commands.completions --write\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
