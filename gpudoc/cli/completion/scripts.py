"""The completion scripts, rendered from the command tree, and where the shipped ones live."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from gpudoc.cli.completion.bash_template import BASH
from gpudoc.cli.completion.model import INSTALLED_DIRS, SCRIPT_NAMES, SHELLS, Node, Switch, command_tree
from gpudoc.cli.completion.zsh_fish_templates import FISH, ZSH
from gpudoc.errors import UsageError

_HEADER = """\
# Generated from gpudoc's own command line by `python -m gpudoc.cli.completion --write`:
# change the CLI (or gpudoc/cli/completion/) and regenerate rather than editing this file.
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
    return _fill(BASH, HEADER=_HEADER.format(shell="bash"), SPECS="\n".join(spec_cases),
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
    return _fill(ZSH, HEADER=_HEADER.format(shell="zsh"), FUNCTIONS=functions)


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
    return _fill(FISH, HEADER=_HEADER.format(shell="fish"), ARGSW="\n".join(argsw_cases),
                 SUBS="\n".join(subs_cases), POS="\n".join(pos_cases), COMPLETES="\n".join(lines))


RENDERERS = {"bash": render_bash, "zsh": render_zsh, "fish": render_fish}


def render(shell: str, tree: Node | None = None) -> str:
    return RENDERERS[shell](tree or command_tree())



def _checkout_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "completions"


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        for path in write_scripts():
            print(path)
        return 0
    sys.stderr.write("usage: python -m gpudoc.cli.completion --write\n")
    return 2
