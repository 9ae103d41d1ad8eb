"""The one error boundary: every exception becomes one line (or a crash report) and an exit code."""

from __future__ import annotations

import errno
import os
import sys
from typing import TextIO

from gpudoc.cli import context
from gpudoc.errors import ExitStatus, GpudocError
from gpudoc.output import printable
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
            status = _fast_main(argv, ws)
            if status is None:
                from gpudoc.cli.app import Gpudoc

                _, status = Gpudoc.run(argv, exit=False)
            _flush_stdout()
            _say_foreign_records(ws)
            return int(status or 0)
    except KeyboardInterrupt:
        # Ctrl-C while gpudoc itself works (imports, NVML, a prompt): no traceback.
        err.write("\ngpudoc: interrupted\n")
        return _error_envelope(ws, argv, ExitStatus.INTERRUPTED, "interrupted")
    except GpudocError as exc:
        _flush_stdout()
        message = printable(str(exc) if str(exc).startswith("gpudoc") else f"gpudoc: {exc}")
        err.write(message + "\n")
        return _error_envelope(ws, argv, exc.exit_status, message, file=exc.file, key=exc.key)
    except BrokenPipeError:
        _silence_stdout()
        return ExitStatus.NEGATIVE
    except Exception as exc:  # this is the boundary
        if isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS and exc.filename is None:
            # Only a stream has no file name: gpudoc's own output (stdout into a full disk, /dev/full).
            _silence_stdout()  # or the interpreter's last flush says it again, with a traceback
            message = f"gpudoc: cannot write the output: {exc.strerror}"
            err.write(message + "\n")
            return ExitStatus.USAGE
        refused = _refused_by_the_machine(exc)
        if refused is not None:
            # A read-only, full or forbidden place a command had to write (or read): no bug, one line.
            message = printable(f"gpudoc: {refused.filename}: {refused.strerror}")
            err.write(message + "\n")
            status = ExitStatus.LAUNCH_REFUSED if argv[1:2] == ["run"] else ExitStatus.USAGE
            return _error_envelope(ws, argv, status, message, file=str(refused.filename))
        report = _write_crash_report(argv, err)
        message = f"gpudoc: internal error (a bug in gpudoc, not in your job); crash report: {report}"
        err.write(
            "gpudoc: internal error (a bug in gpudoc, not in your job).\n"
            f"A crash report ready to paste into an issue is in {report}\n"
        )
        return _error_envelope(ws, argv, ExitStatus.INTERNAL, message, file=report)


def _fast_main(argv: list[str], ws: Workspace) -> int | None:
    """`run` and `check` (the commands that start most often) parse their usual command lines
    without importing plumbum (see ``gpudoc.commands.switches``); None: plumbum's turn."""
    if argv[1:2] == ["run"]:
        from gpudoc.cli.run import fast_main
    elif argv[1:2] == ["check"]:
        from gpudoc.cli.check import fast_main
    else:
        from gpudoc.cli.app import reject_unknown

        reject_unknown(argv[1:2])
        return None
    return fast_main(argv[2:], ws)


# The file system said no: nothing gpudoc could do differently, so no crash report either.
_MACHINE_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.ENOTDIR,
                             errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EIO})


def _refused_by_the_machine(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError) and exc.errno in _MACHINE_ERRNOS and exc.filename is not None:
        return exc
    return None


def _say_foreign_records(ws: Workspace) -> None:
    """Records the command skipped (another user's, unreadable ones) were left out of its answer:
    say so, once (the store owns the notes and remembers which were said)."""
    store = ws.__dict__.get("store")  # only when the command looked at the runs at all
    for note in store.take_notes() if store is not None else ():
        ws.console.error(note)


def _error_envelope(ws: Workspace, argv: list[str], status: int, message: str, *, file: str | None = None,
                    key: str | None = None) -> int:
    """Once ``--json`` was asked, a failure is the JSON envelope too (on stdout, where the caller
    reads the document), beside the one line on stderr. Returns the exit status."""
    command = _json_command(argv[1:])
    if command is not None:
        from gpudoc.render.show import show
        from gpudoc.results import ErrorResult

        try:
            show(ErrorResult(command, int(status), message, file=file, key=key), ws.console, as_json=True)
        except (BrokenPipeError, OSError):
            _silence_stdout()
    return int(status)


def _json_command(args: list[str]) -> str | None:
    """The command's name when its own switches (never the job's, after ``--``) ask for JSON."""
    if not args:
        return None
    if args[0] == "run":
        from gpudoc.commands.run_options import split_command, takes_value

        args = ["run", *split_command(args[1:], takes_value())]
    own = args[: args.index("--")] if "--" in args else args
    if "--json" not in own:
        return None
    words = [a for a in own[:2] if not a.startswith("-")]
    if not words:
        return "gpudoc"
    # A group's subcommand is part of the name, as its own envelope says ("runs show", "profile new").
    return " ".join(words[:2]) if words[1:2] and words[1] in GROUP_SUBCOMMANDS.get(words[0], ()) else words[0]


# The commands that group subcommands, and theirs: named here, where no plumbum is imported (the
# fast path), for the JSON envelope's command name and for `gpudoc runs`' did-you-mean.
GROUP_SUBCOMMANDS = {"profile": ("list", "show", "new", "schema"), "runs": ("show", "diff", "prune")}


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
    import tempfile
    import time
    import traceback

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
