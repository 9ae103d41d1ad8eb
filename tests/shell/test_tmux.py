"""gpudoc inside a real tmux session: what a person sees in the pane.

A private tmux server (its own socket, no config) runs an interactive shell; commands are typed
with ``send-keys`` and the screen is read back with ``capture-pane -e`` (which keeps any escape
sequence the programs printed, so stray colour codes would show).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from tests.conftest import NVIDIA_SMI, REPO

pytestmark = pytest.mark.slow
SNAPSHOT = NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"
PROGRESS = r"""
import sys, time
for i in range(0, 101, 10):
    sys.stdout.write("\rtraining [%-10s] %3d%%" % ("#" * (i // 10), i))
    sys.stdout.flush()
    time.sleep(0.03)
sys.stdout.write("\n")
for n in range(1, 6):
    print("step %d loss %.2f" % (n, 1.0 / n), flush=True)
"""


class Tmux:
    def __init__(self, env: dict) -> None:
        self.socket = f"gpudoc-test-{os.getpid()}-{time.monotonic_ns()}"
        self.env = env

    def __call__(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                                env=self.env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def type(self, line: str) -> None:
        self("send-keys", "-t", "t", "-l", line)
        self("send-keys", "-t", "t", "Enter")

    def screen(self) -> str:
        # -e keeps escape sequences, -J joins wrapped lines, -S - includes the scrollback
        return self("capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "t")

    def wait_for(self, pattern: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if re.search(pattern, screen, re.M):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {pattern!r} in the pane:\n{screen}")
            time.sleep(0.2)


@pytest.fixture
def tmux(isolated_home, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `gpudoc` as a user types it, running this checkout.
    wrapper = bin_dir / "gpudoc"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m gpudoc \"$@\"\n")
    wrapper.chmod(0o755)
    sockets = tempfile.mkdtemp(prefix="gpudoc-tmux-")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        # a short directory of its own: a socket path must fit in 108 bytes
        "TMUX_TMPDIR": sockets,
        "NO_COLOR": "1",
        "PS1": "$ ",
    }
    env.pop("TMUX", None)
    server = Tmux(env)
    server("new-session", "-d", "-s", "t", "-x", "120", "-y", "50", "-c", str(isolated_home),
           "bash --norc --noprofile")
    try:
        yield server
    finally:
        subprocess.run(["tmux", "-L", server.socket, "kill-server"], env=env,
                       capture_output=True, timeout=30)
        shutil.rmtree(sockets, ignore_errors=True)


def assert_no_escape_codes(screen: str) -> None:
    assert "\x1b" not in screen, f"escape sequences with NO_COLOR set:\n{screen!r}"


def test_check_in_tmux_is_readable_without_colour(tmux):
    tmux.type(f"gpudoc check --snapshot {shlex.quote(str(SNAPSHOT))}; echo \"<<done $?>>\"")
    screen = tmux.wait_for(r"^<<done \d+>>")
    assert_no_escape_codes(screen)
    # the dot-leader lines end in a plain marker a person (or grep) can read
    findings = re.findall(r"^  \S.* \.{3,} +(ok|info|skip|warn|FAIL|ERROR)$", screen, re.M)
    assert {"ok", "warn"} <= set(findings)
    assert re.search(r"GPU 0: only 1\.6 GiB of 24\.0 GiB free \.+ +warn", screen)
    assert "<<done 0>>" in screen  # warnings alone do not fail the check


def test_run_in_tmux_keeps_the_childs_progress_bar(tmux, isolated_home):
    (isolated_home / "progress.py").write_text(PROGRESS)
    tmux.type("gpudoc run --no-check -- python3 progress.py; echo \"<<done $?>>\"")
    screen = tmux.wait_for(r"^<<done \d+>>")
    assert_no_escape_codes(screen)
    lines = screen.splitlines()
    # The child had a terminal: each \r redrew the bar in place, so the pane shows its last state
    # on one line, not ten states run together.
    bars = [line for line in lines if "training [" in line]
    assert bars == ["training [##########] 100%"], screen
    steps = [line for line in lines if line.startswith("step ")]
    assert steps == [f"step {n} loss {1.0 / n:.2f}" for n in range(1, 6)]
    assert lines.index(bars[0]) < lines.index(steps[0])
    assert "<<done 0>>" in screen
    # gpudoc's own summary follows the job's output and names the run
    summary = next(i for i, line in enumerate(lines) if line.startswith("gpudoc: run "))
    assert summary > lines.index(steps[-1])
    # and the log kept the exact bytes, carriage returns included
    [log] = list((isolated_home / ".gpudoc" / "runs").glob("*/output.log"))
    data = log.read_bytes()
    assert data.count(b"\rtraining [") == 11
    assert b"step 5 loss 0.20" in data
