"""Single-process helper jobs: python emit.py MODE [ARGS]

bytes N SEED   write N pseudo-random bytes (every byte value, no newlines guaranteed) to stdout
lines N        print N numbered lines, sleeping a little between them (a long-running job)
tty            report whether stdin/stdout are terminals and the window size, then on SIGWINCH again
ignore_term    ignore SIGTERM, print ready, sleep (ignore_int_term: SIGINT too)
stdin          echo what arrives on stdin until EOF
family MARK    ignore SIGTERM, start a child in a session of its own that ignores SIGTERM too
               (a DataLoader worker, a detached helper), print "ready", sleep
sigint         print whether SIGINT is ignored in this process, then exit
"""

import os
import random
import signal
import sys
import time


def main() -> None:
    mode = sys.argv[1]
    out = sys.stdout.buffer
    if mode == "bytes":
        n, seed = int(sys.argv[2]), int(sys.argv[3])
        rng = random.Random(seed)
        left = n
        while left:
            size = min(left, rng.randint(1, 70000))
            out.write(rng.randbytes(size))
            out.flush()
            left -= size
    elif mode == "lines":
        n = int(sys.argv[2])
        delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
        for i in range(n):
            print(f"line {i:05d}", flush=True)
            time.sleep(delay)
    elif mode == "tty":
        resized = []

        def report(*_):
            cols, rows = os.get_terminal_size(1)
            print(f"size {cols}x{rows}", flush=True)
            resized.append(1)

        print(f"isatty {os.isatty(0)} {os.isatty(1)} {os.isatty(2)}", flush=True)
        report()
        signal.signal(signal.SIGWINCH, report)
        print("ready", flush=True)
        deadline = time.time() + 10
        while time.time() < deadline and len(resized) < 2:
            time.sleep(0.02)
    elif mode in ("ignore_term", "ignore_int_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if mode == "ignore_int_term":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(600)
    elif mode == "family":
        import subprocess

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                 "print('child ready', flush=True); time.sleep(600)")
        subprocess.Popen([sys.executable, "-c", child, sys.argv[2]], start_new_session=True)
        time.sleep(0.5)
        print("ready", flush=True)
        time.sleep(600)
    elif mode == "sidecar":
        import subprocess

        # A sidecar (TensorBoard, a logger) in a session of its own with an environment of its own:
        # neither the job's group nor GPUDOC_RUN_ID marks it.
        side = "import time; print('sidecar ready', flush=True); time.sleep(600)"
        subprocess.Popen([sys.executable, "-c", side, sys.argv[2]], start_new_session=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        time.sleep(0.5)
        print("ready", flush=True)
        time.sleep(600 if len(sys.argv) < 4 else float(sys.argv[3]))
    elif mode == "sigint":
        with open("/proc/self/status") as status:
            ignored = int(next(ln for ln in status if ln.startswith("SigIgn:")).split()[1], 16)
        print(f"SIGINT ignored: {bool(ignored >> (signal.SIGINT - 1) & 1)}", flush=True)
    elif mode == "stdin":
        for line in sys.stdin:
            print(f"got {line.rstrip()}", flush=True)
        print("eof", flush=True)


if __name__ == "__main__":
    main()
