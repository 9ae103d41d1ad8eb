"""`gpudoc run`'s two parsers (the plain fast one and plumbum's) agree, and COMMAND stays COMMAND."""

from __future__ import annotations

from gpudoc.cli import run as cli_run
from tests.cli.switches import declared_switches
from tests.conftest import gpudoc_cli


def test_plumbum_command_has_exactly_the_tables_switches():
    assert declared_switches(cli_run.RunCommand) == {name for names, *_ in cli_run.SWITCHES for name in names}


def test_help_and_errors_still_come_from_the_full_parser():
    help_text = gpudoc_cli("run", "--help")
    assert help_text.returncode == 0 and "--retry-oom N" in help_text.stdout and "Examples:" in help_text.stdout
    bad = gpudoc_cli("run", "--retry-oom", "many", "--", "true")
    assert bad.returncode == 125 and "retry-oom" in bad.stderr
