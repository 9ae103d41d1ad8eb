"""The launcher against real torchrun jobs (gloo on the CPU) and real signals.

Every test asserts the exit status, that the log is complete, what the record says, and that no
process of the job is left afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.launch.helpers import (
    EMIT,
    Gpudoc,
    assert_in_order,
    assert_no_leftovers,
    assert_none_left_within,
    job_env,
    last_log,
    last_record,
    marker,
    rank_lines,
    torchrun,
)

pytestmark = pytest.mark.slow


def test_clean_torchrun_run_exits_0_with_every_line_logged(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("ok", mark), cwd=isolated_home)
    assert g.wait(90) == 0, g.stderr
    log = last_log(isolated_home)
    for rank in (0, 1):
        assert_in_order(log, [*rank_lines(rank), f"rank{rank} done\n".encode()])
    assert bytes(g.out) == log  # the terminal (here: a pipe) got exactly the log's bytes
    record = last_record(isolated_home)
    assert (record["status"], record["exit_code"], record["cause"]) == ("ok", 0, "ok")
    assert len(record["pids"]) >= 3  # torchrun and both workers, as they appeared
    assert all(p["create_time"] for p in record["pids"])
    assert "finished" in g.stderr
    assert_no_leftovers(mark)


def test_rank_raising_is_the_recorded_cause(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("raise", mark), cwd=isolated_home)
    assert g.wait(90) == 1, g.stderr
    record = last_record(isolated_home)
    assert (record["status"], record["exit_code"], record["cause"]) == ("failed", 1, "error")
    assert record["diagnosis"]["rank"] == 1
    assert b"boom from rank 1" in last_log(isolated_home)
    assert f"gpudoc fix {record['id']}" in g.stderr
    assert_no_leftovers(mark)


def test_rank_oom_and_exit_is_gpu_oom(isolated_home):
    # The job ends by itself (torchrun tears rank 0 down): a grace long enough that a loaded machine's
    # teardown never races gpudoc's fail-fast (the grace's own test is below).
    (isolated_home / "gpudoc.toml").write_text("[run]\noom_grace_s = 60\n")
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("oom_exit", mark), cwd=isolated_home)
    assert g.wait(90) == 1, g.stderr
    record = last_record(isolated_home)
    assert record["cause"] == "gpu_oom"
    assert record["diagnosis"]["rank"] == 1
    assert record["diagnosis"]["requested_bytes"] == 2 * 1024**3
    assert_in_order(last_log(isolated_home), rank_lines(0))
    assert_no_leftovers(mark)


def test_oom_on_a_hanging_rank_ends_the_whole_job_after_the_grace(isolated_home):
    # Rank 1 prints a CUDA OOM and hangs; rank 0 waits in a collective. Without fail-fast both
    # would wait for the 30-minute collective timeout.
    (isolated_home / "gpudoc.toml").write_text("[run]\noom_grace_s = 1\n")
    mark = marker()
    started = time.monotonic()
    g = Gpudoc("run", "--no-check", "--", *torchrun("oom_block", mark), cwd=isolated_home)
    rc = g.wait(90)
    took = time.monotonic() - started
    assert rc != 0, g.stderr
    record = last_record(isolated_home)
    assert record["cause"] == "gpu_oom"
    assert record["ended_by"] == "gpu_oom"
    assert record["status"] == "failed"
    assert "ending the whole job" in g.stderr
    assert took < 45, took
    assert_no_leftovers(mark)


def test_rank_killed_with_sigkill(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sigkill", mark), cwd=isolated_home)
    assert g.wait(90) == 1, g.stderr
    record = last_record(isolated_home)
    assert record["cause"] in ("host_oom", "signal"), record["diagnosis"]
    assert_in_order(last_log(isolated_home), rank_lines(1))
    assert_no_leftovers(mark)


def test_ctrl_c_reports_130_and_leaves_nothing(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sleep", mark), cwd=isolated_home)
    g.wait_for(b"ready", count=2, timeout=60)
    g.signal(signal.SIGINT)  # what the terminal's Ctrl-C delivers to gpudoc
    assert g.wait(60) == 130, g.stderr  # torchrun itself exits 1 after SIGINT
    record = last_record(isolated_home)
    assert record["status"] == "interrupted"
    assert record["exit_code"] == 130
    assert "SIGINT sent to the job" in g.stderr
    assert_in_order(last_log(isolated_home), [*rank_lines(0), b"rank0 ready\n"])
    assert_no_leftovers(mark)


def test_ctrl_c_three_times_escalates_to_sigkill(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "ignore_int_term", mark, cwd=isolated_home)
    g.wait_for(b"ready", timeout=30)
    g.signal(signal.SIGINT)  # ignored by the job
    time.sleep(0.3)
    g.signal(signal.SIGINT)  # -> SIGTERM, ignored too
    time.sleep(0.3)
    assert g.proc.poll() is None
    g.signal(signal.SIGINT)  # -> SIGKILL
    assert g.wait(30) == 130
    assert "SIGTERM sent to the job" in g.stderr and "SIGKILL sent to the job" in g.stderr
    record = last_record(isolated_home)
    assert record["signal"] == signal.SIGKILL
    assert record["cause"] == "signal" and "OOM" not in record["diagnosis"]["summary"]
    assert_no_leftovers(mark)


def test_sigterm_is_forwarded_and_reported(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sleep", mark), cwd=isolated_home)
    g.wait_for(b"ready", count=2, timeout=60)
    g.signal(signal.SIGTERM)
    assert g.wait(60) == 143, g.stderr
    assert last_record(isolated_home)["status"] == "interrupted"
    assert "forwarded to the job" in g.stderr
    assert_no_leftovers(mark)


def test_sigterm_escalates_to_sigkill_after_the_grace(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "ignore_term", mark, cwd=isolated_home,
               env=job_env(GPUDOC_TERM_GRACE_S="1"))
    g.wait_for(b"ready", timeout=30)
    started = time.monotonic()
    g.signal(signal.SIGTERM)
    assert g.wait(30) == 143, g.stderr
    assert time.monotonic() - started < 10
    record = last_record(isolated_home)
    assert record["signal"] == signal.SIGKILL  # the job itself died of the escalation
    assert record["cause"] == "signal"  # gpudoc's own SIGKILL, never the kernel's OOM killer
    # The status is the user's signal's; the summary says both, so 143 and SIGKILL do not read as a contradiction.
    assert "exit 143 (SIGTERM from the user; the job was then killed by SIGKILL)" in g.stderr
    assert_no_leftovers(mark)


def test_torchrun_sigkilled_leaves_no_worker_behind(isolated_home):
    import psutil

    mark = marker()
    g = Gpudoc("run", "--no-check", "--", *torchrun("sleep", mark), cwd=isolated_home)
    g.wait_for(b"ready", count=2, timeout=60)
    launcher = psutil.Process(g.proc.pid).children()[0]  # torchrun
    workers = launcher.children()
    assert len(workers) == 2
    launcher.kill()  # torchrun's workers survive this on their own
    assert g.wait(60) == 128 + signal.SIGKILL, g.stderr
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    assert_no_leftovers(mark)


def test_gpudoc_sigkilled_leaves_nothing_of_a_job_that_ignores_sigterm(isolated_home):
    # A plain `python train.py` ignoring SIGTERM, with a child in a session of its own: the
    # parent-death signal reaches only the first process, and that one ignores it.
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "family", mark, cwd=isolated_home,
               env=job_env(GPUDOC_TERM_GRACE_S="1"))
    g.wait_for(b"child ready", timeout=30)
    g.wait_for(b"\nready", timeout=30)
    g.proc.kill()
    g.wait(30)
    assert_none_left_within(mark)
    assert "the guard ended the job's 2 process(es)" in g.stderr


def test_gpudoc_sigkilled_leaves_no_sidecar_that_escaped_group_session_and_marker(isolated_home):
    # The guard ends what gpudoc saw in the job while it lived, not only what it can still mark.
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "sidecar", mark, cwd=isolated_home,
               env=job_env(GPUDOC_TERM_GRACE_S="1"))
    g.wait_for(b"sidecar ready", timeout=30)
    g.wait_for(b"\nready", timeout=30)
    time.sleep(2.5)  # a tick or two: gpudoc has seen the sidecar and named it to the guard
    g.proc.kill()
    g.wait(30)
    assert_none_left_within(mark)
    # The sidecar at least (the first process may go first, by its parent-death signal).
    assert "gpudoc ended while its job ran: the guard ended the job's" in g.stderr


def test_processes_the_job_leaves_behind_are_ended_and_said(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "sidecar", mark, "0.5", cwd=isolated_home)
    assert g.wait(60) == 0, g.stderr
    assert_no_leftovers(mark)
    [line] = [ln for ln in g.stderr.splitlines() if "left 1 process(es) running" in ln]
    assert line.startswith("gpudoc: the job left 1 process(es) running: ending them (")


def test_a_launch_that_ends_normally_stands_its_guard_down(isolated_home):
    mark = marker()
    g = Gpudoc("run", "--no-check", "--", "python", "-c", "print('done')", mark, cwd=isolated_home)
    assert g.wait(60) == 0, g.stderr
    # The guard is a fork of gpudoc (the marker is in its command line too): gone with it.
    assert_no_leftovers(mark)
    assert "guard" not in g.stderr


def test_sigint_ignored_by_gpudoc_is_not_handed_to_the_job(isolated_home):
    # A script's background job starts with SIGINT ignored; the job must still answer Ctrl-C.
    proc = subprocess.run([sys.executable, "-m", "gpudoc", "run", "--no-check", "--", "python", str(EMIT), "sigint"],
                          cwd=isolated_home, env=job_env(), capture_output=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stderr
    assert b"SIGINT ignored: False" in proc.stdout


@pytest.mark.parametrize("command, status, words", [
    (["definitely-not-a-command-xyz"], 127, "command not found: definitely-not-a-command-xyz"),
    (["./script.sh"], 126, "not executable"),
    (["./orphan.py"], 126, "cannot run ./orphan.py: its interpreter /opt/no-such/python3 (from its #! line) "
                           "is not installed here"),
])
def test_not_found_and_not_executable(isolated_home, command, status, words):
    (isolated_home / "script.sh").write_text("#!/bin/sh\necho hi\n")  # no execute bit
    (isolated_home / "orphan.py").write_text("#!/opt/no-such/python3\nprint('hi')\n")
    (isolated_home / "orphan.py").chmod(0o755)  # it exists and may run: its interpreter is what is missing
    g = Gpudoc("run", "--no-check", "--", *command, cwd=isolated_home)
    assert g.wait(30) == status
    assert words in g.stderr
    assert not (isolated_home / ".gpudoc" / "runs").exists() or not any((isolated_home / ".gpudoc" / "runs").iterdir())


def test_child_exit_status_and_signal_death_are_passed_through(isolated_home):
    g = Gpudoc("run", "--no-check", "--", "python", "-c", "import sys; sys.exit(7)", cwd=isolated_home)
    assert g.wait(30) == 7
    g = Gpudoc("run", "--no-check", "--", "python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
               cwd=isolated_home)
    assert g.wait(30) == 128 + signal.SIGSEGV
    record = last_record(isolated_home)
    assert record["signal"] == signal.SIGSEGV and record["exit_code"] == 139


def _expected_bytes(n: int, seed: int) -> bytes:
    import random

    rng = random.Random(seed)
    out, left = [], n
    while left:
        size = min(left, rng.randint(1, 70000))
        out.append(rng.randbytes(size))
        left -= size
    return b"".join(out)


def test_log_and_terminal_get_exactly_the_bytes_in_pipe_mode(isolated_home):
    n, seed = 3_000_000, 7
    g = Gpudoc("run", "--no-check", "--", "python", str(EMIT), "bytes", str(n), str(seed), cwd=isolated_home)
    assert g.wait(60) == 0, g.stderr
    expected = _expected_bytes(n, seed)
    assert bytes(g.out) == expected
    assert last_log(isolated_home) == expected


def test_closed_stdout_pipe_does_not_stop_the_job_or_the_log(isolated_home):
    import subprocess
    import sys


    proc = subprocess.Popen([sys.executable, "-m", "gpudoc", "run", "--no-check", "--", "python", str(EMIT),
                             "lines", "60", "0.01"], cwd=isolated_home, env=job_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout.readline() == b"line 00000\n"
    proc.stdout.close()  # like `| head -1`: every later write gets EPIPE
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert last_log(isolated_home) == b"".join(f"line {i:05d}\n".encode() for i in range(60))
    assert last_record(isolated_home)["terminal_lost"] is True


# -- a real terminal: gpudoc on a pty that is its controlling terminal ------------------------

class Terminal:
    """A pseudo-terminal with gpudoc as the session leader on it, like a shell's foreground job."""

    def __init__(self, args, cwd, cols=100, rows=30, env=None):
        import fcntl
        import struct
        import subprocess
        import sys
        import termios
        import threading

        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([sys.executable, "-m", "gpudoc", *args], cwd=cwd, env=env or job_env(),
                                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                     preexec_fn=ctty)
        os.close(slave)
        self.buf = bytearray()
        self.closed = False
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def _pump(self):
        while not self.closed:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.buf.extend(data)

    def wait_for(self, text: bytes, timeout=30.0):
        deadline = time.monotonic() + timeout
        while text not in self.buf:
            assert time.monotonic() < deadline and self.proc.poll() is None, bytes(self.buf)[-2000:]
            time.sleep(0.02)

    def resize(self, cols, rows):
        import fcntl
        import struct
        import termios

        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def hang_up(self):
        self.closed = True
        os.close(self.master)


def test_pty_mode_child_sees_a_terminal_and_follows_the_window_size(isolated_home):
    term = Terminal(["run", "--no-check", "--", "python", str(EMIT), "tty"], isolated_home, cols=100, rows=30)
    term.wait_for(b"ready")
    assert b"isatty True True True" in term.buf
    assert b"size 100x30" in term.buf
    term.resize(120, 40)  # the terminal sends SIGWINCH to gpudoc, gpudoc resizes the job's pty
    term.wait_for(b"size 120x40", timeout=10)
    assert term.proc.wait(30) == 0
    log = last_log(isolated_home)
    # The log holds the job's bytes ("\n"), the terminal showed them as a terminal does ("\r\n").
    assert b"isatty True True True\nsize 100x30\nready\nsize 120x40\n" in log
    assert b"size 120x40\r\n" in term.buf
    term.hang_up()


def test_ctrl_c_typed_on_the_terminal(isolated_home):
    mark = marker()
    term = Terminal(["run", "--no-check", "--", *torchrun("sleep", mark)], isolated_home)
    term.wait_for(b"rank1 ready", timeout=60)
    term.wait_for(b"rank0 ready", timeout=60)
    os.write(term.master, b"\x03")  # the terminal turns it into SIGINT for its foreground group
    assert term.proc.wait(60) == 130
    assert last_record(isolated_home)["status"] == "interrupted"
    term.hang_up()
    assert_no_leftovers(mark)


def test_terminal_hang_up_keeps_the_job_and_the_log_going(isolated_home):
    mark = marker()
    term = Terminal(["run", "--no-check", "--", "python", str(EMIT), "lines", "40", "0.05", mark], isolated_home)
    term.wait_for(b"line 00003")
    term.hang_up()  # the terminal window is closed: SIGHUP, and writes to it fail from now on
    assert term.proc.wait(60) == 0
    assert last_log(isolated_home) == b"".join(f"line {i:05d}\n".encode() for i in range(40))
    record = last_record(isolated_home)
    assert record["status"] == "ok" and record["terminal_lost"] is True
    assert_no_leftovers(mark)


def test_an_error_inside_gpudoc_still_ends_the_job(tmp_path):
    # The launcher's own failure (here: the record cannot be written) must not leave the job
    # running unattended: try/finally ends it.
    import subprocess
    import sys


    mark = marker()
    code = f"""
import os, sys
from pathlib import Path
from gpudoc.launch.spawn import LaunchOptions, Launcher

def on_start(pid, pgid):
    print(pid, flush=True)
    raise OSError("disk full while writing run.json")

opts = LaunchOptions(argv=[sys.executable, {str(EMIT)!r}, "lines", "1000", "0.05", {mark!r}], env=dict(os.environ),
                     cwd=Path("."), log_path=Path("out.log"), term_fd=None, stdin_fd=None, on_start=on_start)
try:
    Launcher(opts).run()
except OSError as exc:
    print("raised", exc, flush=True)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=job_env(PYTHONPATH=str(REPO)))
    lines = done.stdout.split("\n")
    assert lines[1] == "raised disk full while writing run.json", done.stdout + done.stderr
    assert_no_leftovers(mark)
