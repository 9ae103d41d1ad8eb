"""`gpudoc run`'s two parsers (the plain fast one and plumbum's) agree, and COMMAND stays COMMAND."""

from __future__ import annotations

import pytest

from gpudoc.cli import run as cli_run
from tests.conftest import gpudoc_cli


def test_fast_parser_reads_every_switch():
    values = cli_run.parse_fast(["-p", "prof", "--no-check", "--force", "--clean", "-y", "--retry-oom", "3",
                                 "--allow-semantic", "--tmux=t1", "--dry-run", "--json", "--", "python", "t.py"])
    assert values == {"profile": "prof", "no_check": True, "force": True, "clean": True, "yes": True,
                      "retry_oom": 3, "allow_semantic": True, "tmux": "t1", "dry_run": True, "json": True,
                      "command": ["python", "t.py"]}


@pytest.mark.parametrize("args, command", [
    (["python", "t.py", "--lr", "3"], ["python", "t.py", "--lr", "3"]),
    (["--no-check", "torchrun", "--nproc_per_node=2", "t.py", "-p", "x"],
     ["torchrun", "--nproc_per_node=2", "t.py", "-p", "x"]),
    (["-p", "prof", "python", "--", "x"], ["python", "--", "x"]),
    (["--", "--weird-first-arg"], ["--weird-first-arg"]),
])
def test_first_word_that_is_not_ours_starts_the_command(args, command):
    assert cli_run.parse_fast(args)["command"] == command


@pytest.mark.parametrize("args", [
    ["--help"], ["-h", "--", "x"], ["--bogus", "--", "x"], ["--retry-oom", "many", "--", "x"],
    ["--no-check=1", "--", "x"], ["--tmux"], ["-p", "a", "-p", "b", "--", "x"],
])
def test_anything_unusual_goes_to_the_full_parser(args):
    assert cli_run.parse_fast(args) is None


def test_plumbum_command_has_exactly_the_tables_switches():
    command = cli_run.RunCommand
    names = {name for names, *_ in cli_run.SWITCHES for name in names}
    declared = set()
    for attr in dir(command):
        switch = getattr(getattr(command, attr, None), "_switch_info", None)
        if switch is not None and switch.group == "Switches":
            declared.update(("-" if len(n) == 1 else "--") + n for n in switch.names)
    assert declared == names


def test_help_and_errors_still_come_from_the_full_parser():
    help_text = gpudoc_cli("run", "--help")
    assert help_text.returncode == 0 and "--retry-oom N" in help_text.stdout and "Examples:" in help_text.stdout
    bad = gpudoc_cli("run", "--retry-oom", "many", "--", "true")
    assert bad.returncode == 125 and "retry-oom" in bad.stderr
