"""Driving the real `gpudoc run` in a fresh interpreter, the way a user's shell does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from tests.conftest import REPO

JOBS = Path(__file__).resolve().parent / "jobs"
RANKS = JOBS / "ranks.py"
EMIT = JOBS / "emit.py"


def marker() -> str:
    return "gpudoc-test-" + uuid.uuid4().hex[:12]


def job_env(**extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    env.update(extra)
    return env


def torchrun(mode: str, mark: str, nproc: int = 2) -> list[str]:
    # The monitor interval keeps torchrun's own reaction to a dead rank quick on a slow box.
    return ["torchrun", f"--nproc_per_node={nproc}", "--monitor-interval=0.1", str(RANKS), mode, mark]


class Gpudoc:
    """`python -m gpudoc ARGS` with stdout/stderr collected by threads (never blocking the job)."""

    def __init__(self, *args: str, cwd: Path, env: dict | None = None, stdin=subprocess.DEVNULL,
                 new_session: bool = True) -> None:
        self.cwd = Path(cwd)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpudoc", *args], cwd=cwd, env=env or job_env(),
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=new_session,
        )
        self.out = bytearray()
        self.err = bytearray()
        self._threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True)]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream, buf: bytearray) -> None:
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            buf.extend(chunk)

    def wait_for(self, text: bytes, *, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while bytes(self.out).count(text) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} x{count} never came; rc={self.proc.poll()}\n"
                                     f"stdout: {bytes(self.out)[-3000:]!r}\nstderr: {bytes(self.err)[-3000:]!r}")
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.proc.wait(timeout)
        for t in self._threads:
            t.join(5)
        return rc

    @property
    def stderr(self) -> str:
        return bytes(self.err).decode("utf-8", "replace")


def run_dirs(cwd: Path) -> list[Path]:
    root = Path(cwd) / ".gpudoc" / "runs"
    return sorted(p for p in root.iterdir() if (p / "run.json").is_file()) if root.is_dir() else []


def last_record(cwd: Path) -> dict:
    dirs = run_dirs(cwd)
    assert dirs, "no run record was written"
    return json.loads((dirs[-1] / "run.json").read_text())


def last_log(cwd: Path) -> bytes:
    return (run_dirs(cwd)[-1] / "output.log").read_bytes()


def leftovers(mark: str) -> list[str]:
    """Processes (not zombies) whose command line carries the job's marker."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(mark in part for part in proc.info["cmdline"] or ()):
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'])}")
        except psutil.Error:
            continue
    return found


def assert_none_left_within(mark: str, seconds: float = 20) -> None:
    """No process of the job is left once the guard had ``seconds`` to end them (it works after
    gpudoc is gone, so the test waits for it rather than reading the first instant)."""
    deadline = time.monotonic() + seconds
    while leftovers(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert_no_leftovers(mark)


def assert_no_leftovers(mark: str) -> None:
    left = leftovers(mark)
    if left:
        for line in left:
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except OSError:
                pass
    assert not left, f"processes of the job outlived gpudoc: {left}"


def rank_lines(rank: int, n: int = 50) -> list[bytes]:
    return [f"rank{rank} line{i:04d} {'x' * 40}\n".encode() for i in range(n)]


def assert_in_order(log: bytes, lines: list[bytes]) -> None:
    pos = 0
    for line in lines:
        found = log.find(line, pos)
        assert found >= 0, f"{line!r} missing from the log (after byte {pos})"
        pos = found + len(line)
