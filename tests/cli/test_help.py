"""Help that teaches: every command's --help gives a one-line purpose, its switches and at least
two real examples -- examples that the command line itself accepts."""

from __future__ import annotations

import re
import shlex

import pytest

from gpudoc import __version__
from gpudoc.cli.app import Gpudoc
from tests.conftest import gpudoc_cli

SHELL_OPERATORS = {">", ">>", "<", "|", "||", "&&", ";", "2>", "2>&1", "&"}


def registered_commands():
    """Every command path, nested ones included, from plumbum's own registry."""
    found = []

    def visit(app_cls, path):
        found.append((path, app_cls))
        for name, sub in app_cls("gpudoc")._subcommands.items():
            visit(sub.get(), (*path, name))

    visit(Gpudoc, ())
    return found


COMMANDS = registered_commands()
IDS = [" ".join(path) or "gpudoc" for path, _ in COMMANDS]


def parse_only(argv: list[str]):
    """Parse argv with the live CLI the way `gpudoc` would, without running anything."""
    app_cls, args = Gpudoc, ["gpudoc", *argv]
    while True:
        inst = app_cls(args[0])
        swfuncs, tail = inst._parse_args(list(args[1:]))
        inst._validate_args(swfuncs, tail)
        if inst.nested_command is None:
            return app_cls
        app_cls, args = inst.nested_command


def help_sections(text: str) -> tuple[list[str], list[str]]:
    """(the description paragraph's lines, the example lines)."""
    lines = text.splitlines()
    assert lines[0].startswith("gpudoc") and lines[0].endswith(__version__), lines[0]
    assert lines[1] == ""
    description = []
    for line in lines[2:]:
        if not line.strip():
            break
        description.append(line)
    examples = []
    if "Examples:" in lines:
        for line in lines[lines.index("Examples:") + 1:]:
            if not line.strip():
                break
            examples.append(line.strip())
    return description, examples


@pytest.mark.parametrize("path,app_cls", COMMANDS, ids=IDS)
def test_help_teaches(path, app_cls):
    result = gpudoc_cli(*path, "--help")
    assert result.returncode == 0, result.stderr
    description, examples = help_sections(result.stdout)
    where = f"gpudoc {' '.join(path)} --help"

    # One line that says what the command is for: it stands alone (a sentence of its own), so
    # the command list of `gpudoc --help` and a reader skimming get the whole purpose.
    assert description, f"{where}: no description"
    purpose = description[0]
    assert len(description) == 1 or purpose.endswith((".", "!", "?")), (
        f"{where}: the purpose should be one line of its own, got {description}")
    assert 10 <= len(purpose) <= 100, f"{where}: purpose {purpose!r}"
    assert "not built yet" not in purpose.lower(), f"{where}: placeholder purpose"

    # The usage line names the arguments as the README does: NAME, [RUN_ID], [TARGETS...]; never
    # plumbum's "[run_id=]", which reads like a switch with nothing after it.
    usage = result.stdout.split("Usage:\n", 1)[1].splitlines()[0]
    assert usage.startswith(f"    gpudoc {' '.join(path)}".rstrip() + " "), f"{where}: {usage!r}"
    assert "=" not in usage and usage == usage.replace("[run_id", ""), f"{where}: {usage!r}"

    # Every switch is listed, each line under its names (no nameless leftovers).
    assert not re.search(r"^ {20,}Prints this help message", result.stdout, re.M), where
    inst = app_cls("gpudoc")
    for name in inst._switches_by_name:
        flag = ("-" if len(name) == 1 else "--") + name
        assert re.search(rf"(^|[\s,]){re.escape(flag)}([\s,=]|$)", result.stdout, re.M), \
            f"{where}: {flag} missing"

    # At least two examples of this very command, each accepted by the live parser.
    prefix = " ".join(("gpudoc", *path)) + " "
    own = [e for e in examples if e.startswith(prefix) or e == prefix.strip()]
    assert len(own) >= 2, f"{where}: needs two examples starting with {prefix!r}, has {examples}"
    for example in own:
        words = shlex.split(example, comments=True)
        for index, word in enumerate(words):
            if word in SHELL_OPERATORS:
                words = words[:index]
                break
        assert parse_only(words[1:]) is not None, example


def test_top_level_help_lists_every_command_with_its_purpose():
    result = gpudoc_cli("--help")
    assert result.returncode == 0
    for path, _app_cls in COMMANDS:
        if len(path) == 1:
            assert re.search(rf"^    {path[0]}\s+\S", result.stdout, re.M), path


def test_examples_that_do_not_parse_are_caught():
    from gpudoc.errors import UsageError

    with pytest.raises(UsageError):
        parse_only(["profile", "show", "x", "--no-such-switch"])


def test_usage_lines_name_optional_and_repeated_arguments():
    said = {" ".join(path): gpudoc_cli(*path, "--help").stdout.split("Usage:\n", 1)[1].splitlines()[0].strip()
            for path in (("logs",), ("profile", "new"), ("runs", "diff"), ("fix",))}
    assert said == {"logs": "gpudoc logs [SWITCHES] [RUN_ID]", "profile new": "gpudoc profile new [SWITCHES] NAME [RUN_ID]",
                    "runs diff": "gpudoc runs diff [SWITCHES] A B", "fix": "gpudoc fix [SWITCHES] [TARGETS...]"}


def test_fix_apply_says_where_it_writes():
    line = " ".join(gpudoc_cli("fix", "--help").stdout.split("\n    --apply ", 1)[1].split("\n    --", 1)[0].split())
    assert "the profile" in line and "config files" in line and "next command" in line
