"""A word when a run ends: nobody has to poll a pane.

After a run (the whole --retry-oom chain) that lasted at least ``[run] bell_after_s`` seconds
(default 60): a terminal bell, when gpudoc's stderr is a terminal, and a desktop notification
where one can be shown (``notify-send`` on PATH and a graphical session). ``[run] notify =
"COMMAND"`` runs the user's own command (a webhook, mail) through the shell after every run,
with the run's id, status, cause, duration, summary and log in its environment. None of it ever
changes the run's exit status or holds gpudoc up for long: a failing or slow command is said in
one line.

The command is code gpudoc runs as the user: it runs only while every file of the profile that
names it, and the program it names by path, pass the trust rule (``gpudoc.trust``) at the end of
the run too; a profile replaced by another user's while the job ran is refused in one line.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpudoc.procs.bounded import run_bounded
from gpudoc.profiles.model import Profile
from gpudoc.runs.record import RunRecord
from gpudoc.trust import Untrusted, untrusted
from gpudoc.workspace import Workspace

DEFAULT_BELL_AFTER_S = 60.0
COMMAND_TIMEOUT_S = 30.0
DESKTOP_TIMEOUT_S = 5.0
_TAIL_BYTES = 16 * 1024  # of the command's output: its last line says why it failed


def tell_the_end(record: RunRecord, profile: Profile, ws: Workspace) -> None:
    duration = record.duration_s or 0.0
    after = profile.run.get("bell_after_s", DEFAULT_BELL_AFTER_S)
    if duration >= float(after):
        _bell(ws)
        _desktop(record, ws.environ)
    command = profile.run.get("notify")
    if command:
        problem = _distrust(str(command), profile, ws.cwd)
        if problem is not None:
            ws.console.error(f"gpudoc: [run] notify: {problem}: refused, not run ({problem.remedy})")
            return
        _run_command(str(command), record, ws)


def _distrust(command: str, profile: Profile, cwd: Path) -> Untrusted | None:
    """Why the notify command must not run, or None: a profile file of its chain (gpudoc's own
    shipped ones aside) or the program it names by path fails the trust rule."""
    from gpudoc.profiles.loader import shipped_profiles_dir

    shipped = shipped_profiles_dir().resolve()
    files = [Path(p) for p in profile.chain if Path(p).resolve().parent != shipped]
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    if words and "/" in words[0]:
        files.append(cwd / words[0])  # a script of the project's, ./notify.sh; a bare name is found on PATH
    return next((problem for problem in map(untrusted, files) if problem is not None), None)


def run_environment(record: RunRecord, log_path: str) -> dict[str, str]:
    """What the user's notify command is told about the run."""
    diagnosis = record.diagnosis
    return {
        "GPUDOC_RUN_ID": record.id,
        "GPUDOC_RUN_STATUS": record.status,
        "GPUDOC_RUN_CAUSE": record.cause or "",
        "GPUDOC_RUN_EXIT_CODE": "" if record.exit_code is None else str(record.exit_code),
        "GPUDOC_RUN_DURATION_S": f"{record.duration_s or 0:.1f}",
        "GPUDOC_RUN_SUMMARY": diagnosis.summary if diagnosis is not None else "",
        "GPUDOC_RUN_LOG": log_path,
    }


def _headline(record: RunRecord) -> str:
    return f"gpudoc: run {record.id} {'ok' if record.status == 'ok' else record.status.upper()}"


def _bell(ws: Workspace) -> None:
    err = ws.console.err
    try:
        if err.isatty():
            err.write("\a")
            err.flush()
    except (OSError, ValueError, AttributeError):
        pass  # the terminal is gone: nobody to ring for


def _desktop(record: RunRecord, environ: Mapping[str, str]) -> None:
    if not any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")):
        return  # no graphical session (ssh, a server): the bell is all there is
    sender = shutil.which("notify-send", path=environ.get("PATH", os.defpath))
    if sender is None:
        return
    body = record.diagnosis.summary if record.diagnosis is not None else ""
    try:
        subprocess.run([sender, _headline(record), body], env=dict(environ), timeout=DESKTOP_TIMEOUT_S,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass  # a desktop that does not answer is no reason to hold the user's shell


def _run_command(command: str, record: RunRecord, ws: Workspace) -> None:
    """The command in a session of its own (detached from gpudoc's terminal), for at most
    COMMAND_TIMEOUT_S: gpudoc waits for the shell alone, so what it puts in the background goes on
    without holding gpudoc; at the limit the shell and all it started are stopped. Only the end of
    its output is read, for the line that says why it failed."""
    env = {**ws.environ, **run_environment(record, str(ws.store.log_path(record.id)))}
    try:
        done = run_bounded(["/bin/sh", "-c", command], env=env, cwd=str(ws.cwd), timeout_s=COMMAND_TIMEOUT_S,
                           tail_bytes=_TAIL_BYTES, end_group=False)
    except OSError as exc:
        ws.console.error(f"gpudoc: [run] notify: cannot run it: {exc.strerror or exc}")
        return
    if done.timed_out:
        ws.console.error(f"gpudoc: [run] notify: stopped after {COMMAND_TIMEOUT_S:g} s without finishing")
        return
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1][:200]
        ws.console.error(f"gpudoc: [run] notify exited {done.returncode}" + (f": {last}" if last else ""))
