"""The error boundary: usage errors are one line and exit 2; bugs are exit 3 with a crash report."""

from __future__ import annotations

from pathlib import Path

from gpudoc.cli import main as cli_main
from gpudoc.errors import ExitStatus
from tests.conftest import gpudoc_cli, needs_root


def test_unknown_switch_is_one_line_and_exit_2():
    result = gpudoc_cli("--bogus")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["gpudoc: Unknown switch --bogus"]
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_command_names_it():
    result = gpudoc_cli("frobnicate")
    assert result.returncode == 2
    assert "unknown command 'frobnicate'" in result.stderr


def test_help_lists_subcommands_and_examples():
    result = gpudoc_cli("--help")
    assert result.returncode == 0, result.stderr
    for name in ("check", "run", "fix", "estimate", "clean", "runs", "logs", "profile", "completions"):
        assert f"    {name} " in result.stdout
    assert "Examples:" in result.stdout


def test_a_crash_becomes_exit_3_with_a_report(monkeypatch, capsys):
    def explode(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("gpudoc.cli.app.Gpudoc.run", classmethod(lambda cls, *a, **k: explode()))
    status = cli_main.run_cli(["gpudoc", "check"])
    assert status == ExitStatus.INTERNAL
    err = capsys.readouterr().err
    assert "internal error" in err
    report = err.strip().splitlines()[-1].split(" in ", 1)[1]
    assert "RuntimeError: boom" in Path(report).read_text(encoding="utf-8")


def test_keyboard_interrupt_is_130(monkeypatch):
    def interrupt(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("gpudoc.cli.app.Gpudoc.run", classmethod(lambda cls, *a, **k: interrupt()))
    assert cli_main.run_cli(["gpudoc", "check"]) == ExitStatus.INTERRUPTED


@needs_root
def test_a_read_only_working_directory_is_one_line_not_a_crash_report(tmpfs):
    work = tmpfs("ro,size=64k")
    done = gpudoc_cli("profile", "new", "mine", cwd=work)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "crash" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"gpudoc: {work / '.gpudoc'}: Read-only file system"]
