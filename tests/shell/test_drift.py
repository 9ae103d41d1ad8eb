"""The completion scripts against the live CLI: a switch or subcommand that exists in gpudoc but
not in a script fails here (regenerate with `python -m gpudoc.cli.completion --write`).

The live CLI is read through plumbum's own registries (every subcommand's ``_switches_by_name``
and ``_subcommands``), independently of the generator, and each shell is asked for real.
"""

from __future__ import annotations

import pytest

from gpudoc.cli.app import Gpudoc
from gpudoc.cli.completion import SCRIPT_NAMES, SHELLS, render
from tests.shell.drivers import COMPLETIONS, DRIVERS

pytestmark = pytest.mark.slow


def live_cli():
    """{command path: (switch names with dashes, subcommand names)}, straight from plumbum."""
    found = {}

    def visit(app_cls, path):
        app = app_cls("gpudoc")
        switches = {("-" if len(n) == 1 else "--") + n for n in app._switches_by_name}
        found[path] = (switches, set(app._subcommands))
        for name, sub in app._subcommands.items():
            visit(sub.get(), (*path, name))

    visit(Gpudoc, ())
    return found


def test_the_live_cli_has_the_commands_the_spec_names():
    commands = set(live_cli()[()][1])
    assert {"check", "run", "fix", "estimate", "clean", "runs", "logs", "profile",
            "completions"} <= commands


@pytest.mark.parametrize("shell", SHELLS)
def test_every_switch_and_subcommand_of_the_live_cli_completes(shell, isolated_home):
    cli = live_cli()
    paths = sorted(cli)
    lines = []
    for path in paths:
        prefix = " ".join(("gpudoc", *path))
        lines.append(f"{prefix} -")
        lines.append(f"{prefix} ")
    results = DRIVERS[shell](lines, cwd=isolated_home)
    missing = []
    for index, path in enumerate(paths):
        switches, subcommands = cli[path]
        offered_switches = set(results[2 * index])
        offered_words = set(results[2 * index + 1])
        for name in sorted(switches - offered_switches):
            missing.append(f"gpudoc {' '.join(path)} {name}".replace("  ", " "))
        for name in sorted(subcommands - offered_words):
            missing.append(f"gpudoc {' '.join(path)} {name}".replace("  ", " "))
    assert not missing, (
        f"{shell} completion lacks (run `python -m gpudoc.cli.completion --write`):\n"
        + "\n".join(missing)
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shipped_script_is_what_the_generator_makes_now(shell):
    shipped = (COMPLETIONS / SCRIPT_NAMES[shell]).read_text(encoding="utf-8")
    assert shipped == render(shell), (
        f"completions/{SCRIPT_NAMES[shell]} is stale: run "
        "`python -m gpudoc.cli.completion --write`"
    )
