"""Commands gpudoc does not control run within bounds: a limit that ends the whole group, a tail
of their output, and no wait for what they left in the background."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from gpudoc.procs.bounded import LineSession, run_bounded


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
    code = ("import sys\nfrom gpudoc.procs.bounded import LineSession, run_bounded\n"
            "d = run_bounded(['/bin/sh', '-c', 'head -c 200000000 /dev/zero | tr \"\\\\0\" x; echo; echo last'],"
            " env={'PATH': '/usr/bin:/bin'}, cwd='.', timeout_s=240)\n"
            "print(len(d.stdout), d.stdout.endswith('last\\n'), d.timed_out,"
            " int(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[:3] == [str(64 * 1024), "True", "False"]
    # VmHWM, this process's own peak in KiB (ru_maxrss would carry the forking pytest worker's across exec)
    assert int(out[3]) < 100 * 1024, f"{int(out[3]) // 1024} MiB for 200 MB of output"


# A line server: each request line answered by one marked line, after some output that is not an
# answer; "stop" ends it without an answer, "hang" never answers (and leaves a child behind).
SERVER = """
import subprocess, sys, time
for line in sys.stdin:
    request = line.strip()
    print("chatter " * 3)
    print("progress 50%\\rprogress 100%\\r", end="")  # a progress bar's line ends with \\r
    if request == "stop":
        print("going", file=sys.stderr)
        sys.exit(4)
    if request == "hang":
        child = subprocess.Popen(["sleep", "300"])
        print(child.pid, file=sys.stderr, flush=True)
        time.sleep(300)
    if request == "flood":
        sys.stdout.write("x" * 5_000_000 + "\\n")
    print("@@ " + request + " " + str(__import__("os").getpid()), flush=True)
"""


def _session(tmp_path) -> LineSession:
    return LineSession([sys.executable, "-c", SERVER], env=os.environ, cwd=str(tmp_path), marker=b"@@ ",
                       limit=64 * 1024)


def test_a_session_answers_each_request_from_one_process(tmp_path):
    with _session(tmp_path) as session:
        first = session.ask("one", timeout_s=30)
        second = session.ask("flood", timeout_s=30)  # a line past the limit is passed over, never held
        assert first.answer is not None and second.answer is not None
        assert first.answer.split()[0] == "one" and second.answer.split()[0] == "flood"
        assert first.answer.split()[1] == second.answer.split()[1] == str(session.proc.pid)
        ended = session.ask("stop", timeout_s=30)
    assert ended.answer is None and ended.returncode == 4 and ended.stderr.strip() == "going"
    assert session.ask("one", timeout_s=30).answer is None  # ended: nothing more is asked


def test_a_request_past_its_limit_ends_the_whole_group(tmp_path):
    session = _session(tmp_path)
    reply = session.ask("hang", timeout_s=3)
    assert reply.timed_out and reply.answer is None and reply.returncode is None
    child = int(reply.stderr.split()[0])
    assert gone_soon(child) and gone_soon(session.proc.pid)


def test_closing_a_session_ends_what_it_started(tmp_path):
    session = _session(tmp_path)
    assert session.ask("one", timeout_s=30).answer is not None
    session.close()
    assert session.proc.returncode is not None  # waited for: no zombie, no orphan
