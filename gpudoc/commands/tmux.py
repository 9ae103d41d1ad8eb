"""`gpudoc run --tmux NAME`: the same `gpudoc run` in a new detached tmux session."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

from gpudoc.commands.run_options import RunOptions
from gpudoc.errors import LaunchError
from gpudoc.workspace import Workspace


def check_session_name(name: str | None) -> str:
    """``name`` when tmux can take it as a session name; else the launch is refused."""
    if not name or any(c in name for c in ".:") or name.startswith("-") or not name.isprintable():
        raise LaunchError(f"--tmux: {name!r} is not a usable tmux session name "
                          "(printable, no '.', ':' or leading '-')")
    return name


def start_in_tmux(options: RunOptions, ws: Workspace) -> int:
    import subprocess

    console, environ, cwd = ws.console, ws.environ, ws.cwd
    name = check_session_name(options.tmux)
    tmux = shutil.which("tmux", path=environ.get("PATH", os.defpath))
    if tmux is None:
        raise LaunchError("--tmux: tmux is not installed (apt-get install tmux, or brew install tmux)")
    env = {k: v for k, v in environ.items() if k not in ("TMUX", "TMUX_PANE")}
    probe = subprocess.run([tmux, "has-session", "-t", f"={name}"], env=env, capture_output=True, text=True)
    if probe.returncode == 0:
        raise LaunchError(f"--tmux: a tmux session named '{name}' already exists "
                          f"(attach: tmux attach -t {name}, or pick another name)")
    keep = _keep_mode(options, ws)
    # The window stays after a failure (or always, or never: [run] tmux_keep) with gpudoc's summary
    # on it, until Enter: a failed run's traceback is not gone when the user attaches.
    inner = ["/bin/sh", "-c", _KEEP_SCRIPT.replace("KEEP", keep), "gpudoc-tmux",
             sys.executable, "-m", "gpudoc", *options.to_argv()]
    # A running tmux server gives new sessions its own environment, not ours: pass ours along
    # (only what differs, to stay far below tmux's command size limit).
    env_args = _tmux_env_args(tmux, env)
    cmd = [tmux, "new-session", "-d", "-s", name, "-c", str(cwd), *env_args, "--", *inner]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise LaunchError(f"--tmux: tmux could not start the session: {done.stderr.strip() or done.returncode}")
    console.error(f"gpudoc: started in tmux session '{name}'\n"
                  f"  attach:  tmux attach -t {name}\n"
                  f"  follow:  gpudoc logs -f   (from any pane, in {cwd})")
    return 0


_KEEP_SCRIPT = """"$@"; status=$?
case "KEEP:$status" in
  always:*|failure:[1-9]*)
    printf '\\n[gpudoc: the run ended with exit status %s; press Enter to close this window]' "$status"
    read -r _ ;;
esac
exit "$status"
"""


def _keep_mode(options: RunOptions, ws: Workspace) -> str:
    """``[run] tmux_keep``: failure (default), always or never (the profile's schema checks it)."""
    from gpudoc.commands.run_attempt import refusing

    profile = refusing(lambda: ws.load_profile(options.profile))
    return str(profile.run.get("tmux_keep", "failure"))


def _tmux_env_args(tmux: str, env: Mapping[str, str]) -> list[str]:
    import subprocess

    shown = subprocess.run([tmux, "show-environment", "-g"], env=env, capture_output=True, text=True)
    if shown.returncode != 0:
        return []  # no server yet: the new server is started from our environment
    server: dict[str, str | None] = {}
    for line in shown.stdout.splitlines():
        if line.startswith("-"):
            server[line[1:]] = None
        elif "=" in line:
            key, _, value = line.partition("=")
            server[key] = value
    args = []
    for key, value in env.items():
        if key in ("TERM", "SHLVL", "_", "PWD", "OLDPWD"):
            continue
        if server.get(key) != value:
            args += ["-e", f"{key}={value}"]
    return args
