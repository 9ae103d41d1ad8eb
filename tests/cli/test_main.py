"""The error boundary: usage errors are one line and exit 2; bugs are exit 3 with a crash report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoc.cli import main as cli_main
from gpudoc.errors import ExitStatus
from tests.conftest import REPO, gpudoc_cli, needs_root


def test_unknown_switch_is_one_line_and_exit_2():
    result = gpudoc_cli("--bogus")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["gpudoc: Unknown switch --bogus"]
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_command_names_it():
    result = gpudoc_cli("frobnicate")
    assert result.returncode == 2
    assert "unknown command 'frobnicate'" in result.stderr
    assert "did you mean" not in result.stderr


@pytest.mark.parametrize("args", [("autotune", "--help"), ("autotune", "-h"), ("chek", "--help-all")])
def test_an_unknown_command_with_switches_is_still_unknown(args):
    # `gpudoc autotune --help` printed the top-level help and exited 0: a script probing for the
    # command took it for there.
    result = gpudoc_cli(*args)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"gpudoc: unknown command '{args[0]}'")
    assert gpudoc_cli("--help").returncode == 0


def test_a_mistyped_command_or_runs_subcommand_gets_a_did_you_mean():
    typo = gpudoc_cli("chek")
    assert typo.returncode == 2 and "unknown command 'chek' (did you mean 'check'?)" in typo.stderr
    sub = gpudoc_cli("runs", "shwo")
    assert sub.returncode == 2 and "unexpected argument 'shwo' (did you mean 'show'?)" in sub.stderr
    run_id = gpudoc_cli("runs", "20261125-063709418-863c60")
    assert run_id.returncode == 2 and "`gpudoc runs show RUN_ID`" in run_id.stderr


@pytest.mark.parametrize("group", sorted(cli_main.GROUP_SUBCOMMANDS))
def test_the_groups_named_on_the_fast_path_are_the_cli_s_own(group):
    shown = gpudoc_cli(group, "--help").stdout.split("Sub-commands:", 1)[1].split("Examples:", 1)[0]
    listed = {line.split()[0] for line in shown.splitlines() if line.startswith("    ") and line[4] != " "}
    assert listed == set(cli_main.GROUP_SUBCOMMANDS[group])


def test_help_lists_subcommands_and_examples():
    result = gpudoc_cli("--help")
    assert result.returncode == 0, result.stderr
    for name in ("check", "run", "fix", "estimate", "clean", "runs", "logs", "profile", "completions"):
        assert f"    {name} " in result.stdout
    assert "Examples:" in result.stdout


# A command's work raising, on both ways in: plumbum's parser, and check's own (no plumbum).
THROUGH = pytest.mark.parametrize(("target", "argv"), [
    ("gpudoc.cli.app.Gpudoc.run", ["gpudoc", "runs"]),
    ("gpudoc.commands.check.check", ["gpudoc", "check"]),
])


def _raising(monkeypatch, target: str, exc: BaseException) -> None:
    def fail(*_args, **_kwargs):
        raise exc

    import gpudoc.commands.check  # noqa: F401 - loaded, so that the patch finds it

    monkeypatch.setattr(target, classmethod(lambda cls, *a, **k: fail()) if target.endswith(".run") else fail)


@THROUGH
def test_a_crash_becomes_exit_3_with_a_report(monkeypatch, capsys, target, argv):
    _raising(monkeypatch, target, RuntimeError("boom"))
    status = cli_main.run_cli(argv)
    assert status == ExitStatus.INTERNAL
    err = capsys.readouterr().err
    assert "internal error" in err
    report = err.strip().splitlines()[-1].split(" in ", 1)[1]
    assert "RuntimeError: boom" in Path(report).read_text(encoding="utf-8")


@THROUGH
def test_keyboard_interrupt_is_130(monkeypatch, target, argv):
    _raising(monkeypatch, target, KeyboardInterrupt())
    assert cli_main.run_cli(argv) == ExitStatus.INTERRUPTED


@needs_root
def test_a_read_only_working_directory_is_one_line_not_a_crash_report(tmpfs):
    work = tmpfs("ro,size=64k")
    done = gpudoc_cli("profile", "new", "mine", cwd=work)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "crash" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"gpudoc: {work / '.gpudoc'}: Read-only file system"]


@pytest.mark.parametrize("argv", [("profile", "list"), ("completions", "bash")])
def test_output_into_a_full_device_is_one_line_not_a_crash_report(tmp_path, argv):
    with open("/dev/full", "w") as full:  # Linux's always-full device
        done = subprocess.run([sys.executable, "-m", "gpudoc", *argv], cwd=tmp_path, stdout=full,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["gpudoc: cannot write the output: No space left on device"]
