"""`gpudoc completions SHELL` and the generator behind completions/."""

from __future__ import annotations

import io
import subprocess

import pytest

from gpudoc.cli.completion import scripts as completions
from gpudoc.errors import UsageError
from tests.conftest import REPO, gpudoc_cli


@pytest.mark.parametrize("shell", completions.SHELLS)
def test_prints_the_shipped_script(shell):
    result = gpudoc_cli("completions", shell)
    assert result.returncode == 0, result.stderr
    shipped = (REPO / "completions" / completions.SCRIPT_NAMES[shell]).read_text()
    assert result.stdout == shipped


def test_unknown_shell_is_a_usage_error():
    result = gpudoc_cli("completions", "tcsh")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "gpudoc completions: unknown shell 'tcsh' (choose bash, zsh or fish)"
    )
    assert gpudoc_cli("completions").returncode == 2


def test_installed_location_is_used_outside_a_checkout(tmp_path, monkeypatch):
    installed = tmp_path / completions.INSTALLED_DIRS["zsh"]
    installed.mkdir(parents=True)
    (installed / "_gpudoc").write_text("#compdef gpudoc\n# installed copy\n")
    monkeypatch.setattr(completions, "_checkout_dir", lambda: tmp_path / "no-checkout")
    monkeypatch.setattr(completions.sys, "prefix", str(tmp_path))
    out = io.StringIO()
    assert completions.print_completions("zsh", out) == 0
    assert out.getvalue() == "#compdef gpudoc\n# installed copy\n"


def test_without_any_script_on_disk_it_generates_one(tmp_path, monkeypatch):
    monkeypatch.setattr(completions, "_checkout_dir", lambda: tmp_path / "no-checkout")
    monkeypatch.setattr(completions.sys, "prefix", str(tmp_path))
    assert completions.script_text("fish") == completions.render("fish")
    with pytest.raises(UsageError):
        completions.script_text("powershell")


def test_tree_reads_switch_kinds_from_the_cli():
    tree = completions.command_tree()
    profile_show = tree.children["profile"].children["show"]
    assert profile_show.positionals == ("profiles",)
    run = tree.children["run"]
    assert run.takes_command
    assert tree.children["fix"].positionals == ("runs",) and tree.children["fix"].variadic
    assert tree.children["logs"].positionals == ("runs",)
    snapshot = next(s for s in tree.children["profile"].children["new"].switches
                    if "--snapshot" in s.names)
    assert snapshot.value == "files" and snapshot.repeat
    help_switch = next(s for s in run.switches if "--help" in s.names)
    assert help_switch.names == ("-h", "--help") and help_switch.value is None
    # the command's own switches come before plumbum's meta-switches
    assert run.switches[-1].names[0] in {"--help-all", "-h", "-v", "--completions"}


def test_write_scripts_is_idempotent(tmp_path):
    first = completions.write_scripts(tmp_path)
    texts = [p.read_text() for p in first]
    second = completions.write_scripts(tmp_path)
    assert [p.read_text() for p in second] == texts
    assert sorted(p.name for p in first) == sorted(completions.SCRIPT_NAMES.values())


@pytest.mark.parametrize("shell", completions.SHELLS)
def test_scripts_parse_in_their_shell(shell):
    path = REPO / "completions" / completions.SCRIPT_NAMES[shell]
    argv = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}[shell]
    result = subprocess.run([*argv, str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
