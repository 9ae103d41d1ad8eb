"""What `Launcher` is asked to run, and what came of it; the child's set-up between fork and exec."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import termios
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gpudoc.errors import ExitStatus, LaunchError
from gpudoc.launch import reaper
from gpudoc.procs.identity import ProcessRef

if TYPE_CHECKING:
    from gpudoc.launch.scan import LiveScan
    from gpudoc.launch.spawn import Launcher


@dataclass
class LaunchOptions:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path | None
    log_mode: int = 0o600  # the log holds everything the job printed: private unless the run is shared
    use_pty: bool = False
    term_fd: int | None = 1
    stdin_fd: int | None = 0
    term_grace_s: float = 10.0  # SIGTERM to gpudoc: forward, SIGKILL after this long
    end_grace_s: float = 3.0  # ending the job ourselves (fail-fast, leftovers): TERM -> KILL
    linger_s: float = 0.5  # after the first process exits, how long the rest may take on their own
    drain_s: float = 2.0  # after every process is gone, how long to wait for the output's end
    on_start: Callable[[int, int], None] | None = None
    scan: LiveScan | None = None  # the live failure scan, fed after the tee
    on_tick: Callable[[Launcher], None] | None = None
    warn: Callable[[str], None] | None = None


@dataclass
class Outcome:
    pid: int | None  # None only when the job never started (gpudoc raised LaunchError instead)
    pgid: int | None
    exit_code: int | None  # the first process's own exit code, when it exited
    signal: int | None  # the signal that ended the first process, when one did
    status: int  # gpudoc's exit status for this job (SPEC)
    interrupted_by: int | None  # SIGINT/SIGTERM the user (or a supervisor) sent to gpudoc
    ended_by: str | None  # why gpudoc ended the job itself ("gpu_oom", ...), None when it did not
    started: float
    ended: float
    terminal_lost: bool
    log_error: str | None
    survivors: list[int] = field(default_factory=list)  # PIDs even SIGKILL did not end
    processes: list[ProcessRef] = field(default_factory=list)  # every process seen in the job


def safe_warn(message: str) -> None:
    try:
        os.write(2, f"gpudoc: {message}\n".encode())
    except OSError:
        pass  # stderr is gone with the terminal


def spawn_error(argv0: str, exc: OSError, *, cwd: Path | None = None, path_var: str | None = None) -> LaunchError:
    """The SPEC's 127/126/125 for a command that could not be started, with a message naming it."""
    if isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOENT:
        interpreter = _missing_interpreter(argv0, cwd, path_var)
        if interpreter is not None:
            # execve says ENOENT for the interpreter of a script that itself exists.
            return LaunchError(f"cannot run {argv0}: its interpreter {interpreter} (from its #! line) is not "
                               "installed here", exit_status=ExitStatus.NOT_EXECUTABLE)
        return LaunchError(f"command not found: {argv0}", exit_status=ExitStatus.NOT_FOUND)
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EPERM):
        reason = "exec format error" if exc.errno == errno.ENOEXEC else "permission denied"
        return LaunchError(f"command not executable: {argv0} ({reason})",
                           exit_status=ExitStatus.NOT_EXECUTABLE)
    return LaunchError(f"cannot start {argv0}: {os.strerror(exc.errno or 0) or exc}")


def pty_child_setup() -> None:
    # Runs in the child between fork and exec: it is already a session leader (setsid); make the
    # pty on fd 0 its controlling terminal so job control and SIGWINCH reach it.
    try:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    except OSError:
        pass
    pipe_child_setup()


RESET_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def pipe_child_setup() -> None:
    # gpudoc started with SIGINT ignored (a script's background job) must not hand that on: an
    # ignored disposition survives exec, and the Ctrl-C gpudoc forwards later would do nothing.
    for sig in RESET_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    # If gpudoc is SIGKILLed (the one signal it cannot handle), the job's first process gets
    # SIGTERM at once; the guard (launch/guard.py) ends the rest of the job.
    reaper.set_parent_death_signal(signal.SIGTERM)


def _missing_interpreter(argv0: str, cwd: Path | None, path_var: str | None) -> str | None:
    """The ``#!`` interpreter of the script ``argv0`` names, when the script exists and that does not."""
    import shutil

    if os.sep in argv0:
        script: str | None = os.path.join(cwd, argv0) if cwd is not None else argv0
    else:
        script = shutil.which(argv0, path=path_var)
    from gpudoc.job.installed import shebang  # only on this error path

    words = shebang(script) if script is not None else None
    if not words:
        return None
    interpreter = words[0]
    return None if os.path.exists(interpreter) else interpreter
