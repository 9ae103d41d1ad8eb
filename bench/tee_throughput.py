#!/usr/bin/env python3
"""Tee throughput and gpudoc's memory: 300 MB of training-log-like output through `gpudoc run`.

Pipe mode: `gpudoc run --no-check -- cat FILE > /dev/null` against `cat FILE | tee LOG > /dev/null`
(coreutils tee, also writing a log file). Pty mode: gpudoc on a terminal (it gives the job a pty
of its own and copies) against `cat FILE` writing straight to a terminal; a thread drains the
terminal in both cases. Prints times, throughput ratios (targets: >= 0.8x tee in pipe mode; in pty
mode within 1.25x the time of a direct terminal, 1.1x the goal: on a terminal gpudoc adds a second
pty and the log to the kernel's work) and gpudoc's peak RSS (target < 60 MB).
usage: python bench/tee_throughput.py [MB] [REPEATS]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compile_package() -> None:
    """Byte-compile gpudoc as `pip install` does: start-up must not include compiling sources."""
    import compileall

    compileall.compile_dir(str(REPO / "gpudoc"), quiet=1)


def make_input(path: Path, size: int) -> None:
    # Lines like a training loop's, with the odd keyword the failure scanner looks at.
    block = "".join(
        f"step {i:7d} | loss {1.0 / (i + 1):.6f} | lr 3.0e-04 | grad_norm 0.8731 | tokens/s 123456 | "
        f"memory 21.3 GiB\n" if i % 50 == 0 else
        f"step {i:7d} | loss {1.0 / (i + 1):.6f} | lr 3.0e-04 | grad_norm 0.8731 | tokens/s 123456\n"
        for i in range(20000)
    ).encode()
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            chunk = block[: size - written]
            handle.write(chunk)
            written += len(chunk)


def run_wait(argv, **kwargs) -> tuple[float, int]:
    """Wall time and the peak RSS (KiB) of the process tree it waited for."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:6]} failed with {proc.returncode}")
    return elapsed, usage.ru_maxrss


def drained_pty():
    master, slave = os.openpty()
    total = [0]

    def pump():
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:
                return
            if not data:
                return
            total[0] += len(data)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return master, slave, thread, total


def main() -> int:
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    size = mb * 1000 * 1000
    tee = shutil.which("tee")
    compile_package()
    with tempfile.TemporaryDirectory(prefix="gpudoc-bench-") as work_dir:
        work = Path(work_dir)
        data = work / "input.log"
        make_input(data, size)
        env = {**os.environ, "PYTHONPATH": str(REPO), "GPUDOC_HOME": str(work / "home")}
        gpudoc = [sys.executable, "-m", "gpudoc", "run", "--no-check", "--", "cat", str(data)]
        devnull = open(os.devnull, "wb")  # noqa: SIM115 - shared by every timed pipeline below

        def tee_pipeline() -> float:
            start = time.perf_counter()
            cat = subprocess.Popen(["cat", str(data)], stdout=subprocess.PIPE)
            t = subprocess.Popen([tee, str(work / "tee.log")], stdin=cat.stdout, stdout=devnull)
            cat.stdout.close()
            t.wait()
            cat.wait()
            return time.perf_counter() - start

        def gpudoc_pipe() -> tuple[float, int]:
            return run_wait(gpudoc, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=devnull,
                            stderr=subprocess.DEVNULL)

        def on_pty(argv, env_) -> tuple[float, int, int]:
            master, slave, thread, total = drained_pty()
            try:
                elapsed, rss = run_wait(argv, env=env_, cwd=work, stdin=subprocess.DEVNULL, stdout=slave,
                                        stderr=subprocess.DEVNULL)
            finally:
                os.close(slave)
                thread.join(30)
                os.close(master)
            return elapsed, rss, total[0]

        # Warm-up: page cache for the input, __pycache__ for gpudoc.
        tee_pipeline()
        gpudoc_pipe()
        tees, pipes, direct, ptys, rss = [], [], [], [], []

        def settle() -> None:
            # Each run writes 300 MB: flush and delete the previous logs so that the kernel's
            # write-back of one run does not throttle the next one.
            for log in (work / "home" / "runs").glob("*/output.log"):
                if log.stat().st_size != size:
                    raise SystemExit(f"{log}: {log.stat().st_size} bytes logged of {size}")
                log.unlink()
            (work / "tee.log").unlink(missing_ok=True)
            os.sync()

        for _ in range(repeats):
            settle()
            tees.append(tee_pipeline())
            settle()
            t, r = gpudoc_pipe()
            pipes.append(t)
            rss.append(r)
            settle()
            t, _, _seen = on_pty(["cat", str(data)], env)
            direct.append(t)
            settle()
            t, r, seen_g = on_pty(gpudoc, env)
            ptys.append(t)
            rss.append(r)
            if seen_g < size:
                raise SystemExit(f"pty mode lost output: {seen_g} of {size} bytes reached the terminal")
        settle()
        startup = [sys.executable, "-m", "gpudoc", "run", "--no-check", "--", "true"]
        start_times = [run_wait(startup, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=devnull,
                                stderr=subprocess.DEVNULL)[0] for _ in range(repeats)]

    t_tee, t_pipe = statistics.median(tees), statistics.median(pipes)
    t_direct, t_pty = statistics.median(direct), statistics.median(ptys)
    t_start = statistics.median(start_times)
    mbps = lambda t: size / t / 1e6  # noqa: E731
    print(f"tee throughput: {mb} MB of log-like output, median of {repeats}")
    print(f"  pipe  cat | tee LOG > /dev/null            {t_tee:6.3f} s  {mbps(t_tee):7.0f} MB/s")
    print(f"  pipe  gpudoc run -- cat > /dev/null        {t_pipe:6.3f} s  {mbps(t_pipe):7.0f} MB/s"
          f"   ratio {t_tee / t_pipe:.2f}x tee (target >= 0.80)")
    steady = max(t_pipe - t_start, 1e-9)
    print(f"        (gpudoc's start-up {t_start:.3f} s excluded: {mbps(steady):7.0f} MB/s,"
          f" ratio {t_tee / steady:.2f}x)")
    print(f"  pty   cat on a terminal                    {t_direct:6.3f} s  {mbps(t_direct):7.0f} MB/s")
    print(f"  pty   gpudoc run -- cat on a terminal      {t_pty:6.3f} s  {mbps(t_pty):7.0f} MB/s"
          f"   ratio {t_direct / t_pty:.2f}x direct (target >= 0.80, goal 0.91)")
    peak = max(rss) / 1024
    print(f"  gpudoc peak RSS                            {peak:6.1f} MB  (target < 60 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
