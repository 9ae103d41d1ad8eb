"""The one error boundary: every exception becomes one line (or a crash report) and an exit code."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from typing import TextIO

from gpudoc.cli import context
from gpudoc.errors import ExitStatus, GpudocError
from gpudoc.workspace import Workspace


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_cli(argv))


def run_cli(argv: list[str] | None = None, workspace: Workspace | None = None) -> int:
    """Run one gpudoc command line in ``workspace`` (default: this process's directory, environment
    and streams) and return its exit status; every error ends here."""
    argv = list(sys.argv if argv is None else argv)
    ws = workspace or Workspace()
    err = ws.console.err
    try:
        with context.using(ws):
            if argv[1:2] == ["run"]:
                # The launch path skips plumbum's import when it can (see gpudoc.commands.run_options).
                from gpudoc.cli.run import fast_main

                status = fast_main(argv[2:], ws)
                if status is not None:
                    return int(status)
            from gpudoc.cli.app import Gpudoc

            _, status = Gpudoc.run(argv, exit=False)
            _flush_stdout()
            return int(status or 0)
    except KeyboardInterrupt:
        # Ctrl-C while gpudoc itself works (imports, NVML, a prompt): no traceback.
        err.write("\ngpudoc: interrupted\n")
        return ExitStatus.INTERRUPTED
    except GpudocError as exc:
        _flush_stdout()
        err.write(f"gpudoc: {exc}\n" if not str(exc).startswith("gpudoc") else f"{exc}\n")
        return int(exc.exit_status)
    except BrokenPipeError:
        _silence_stdout()
        return ExitStatus.NEGATIVE
    except Exception:  # noqa: BLE001 - this is the boundary
        report = _write_crash_report(argv, err)
        err.write(
            "gpudoc: internal error (a bug in gpudoc, not in your job).\n"
            f"A crash report ready to paste into an issue is in {report}\n"
        )
        return ExitStatus.INTERNAL


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def _write_crash_report(argv: list[str], err: TextIO) -> str:
    from gpudoc import __version__

    lines = [
        f"gpudoc {__version__} crash report",
        f"time: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
        f"python: {sys.version.split()[0]} ({sys.executable})",
        f"platform: {sys.platform}",
        f"argv: {argv}",
        "",
        traceback.format_exc(),
    ]
    fd, path = tempfile.mkstemp(prefix="gpudoc-crash-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    err.write(traceback.format_exc(limit=-3))
    return path
