"""Commands gpudoc does not control run within bounds: a limit that ends the whole group, a tail
of their output, and no wait for what they left in the background."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from gpudoc.procs.bounded import run_bounded


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_soon(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` ends (or is a zombie: under xdist a subreaper worker adopts the orphan)."""
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def _run(script: str, tmp_path, **kw):
    return run_bounded(["/bin/sh", "-c", script], env=os.environ, cwd=str(tmp_path), **kw)


def test_the_answer_and_input_pass_through(tmp_path):
    done = _run("cat; echo oops >&2; exit 3", tmp_path, timeout_s=10, input_text="x" * 300_000)
    assert done.returncode == 3 and len(done.stdout) == 64 * 1024 and done.stderr == "oops\n"


def test_at_the_limit_the_whole_group_ends(tmp_path):
    pidfile = tmp_path / "child"
    started = time.monotonic()
    done = _run(f"sleep 300 & echo $! > {pidfile}; sleep 300", tmp_path, timeout_s=1)
    assert done.timed_out and done.returncode is None and time.monotonic() - started < 5
    assert gone_soon(int(pidfile.read_text()))


def test_a_background_process_holding_the_pipes_does_not_hold_gpudoc(tmp_path):
    pidfile = tmp_path / "child"
    started = time.monotonic()
    done = _run(f"sleep 30 & echo $! > {pidfile}; echo sent", tmp_path, timeout_s=20, end_group=False)
    assert done.returncode == 0 and done.stdout == "sent\n" and time.monotonic() - started < 3
    child = int(pidfile.read_text())
    assert alive(child)  # the user's background work goes on, in its own session
    assert os.getsid(child) != os.getsid(0)
    os.kill(child, 9)


def test_output_of_hundreds_of_megabytes_costs_a_tail(tmp_path):
    code = ("import sys\nfrom gpudoc.procs.bounded import run_bounded\n"
            "d = run_bounded(['/bin/sh', '-c', 'head -c 200000000 /dev/zero | tr \"\\\\0\" x; echo; echo last'],"
            " env={'PATH': '/usr/bin:/bin'}, cwd='.', timeout_s=240)\n"
            "print(len(d.stdout), d.stdout.endswith('last\\n'), d.timed_out,"
            " int(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[:3] == [str(64 * 1024), "True", "False"]
    # VmHWM, this process's own peak in KiB (ru_maxrss would carry the forking pytest worker's across exec)
    assert int(out[3]) < 100 * 1024, f"{int(out[3]) // 1024} MiB for 200 MB of output"
