"""Shared test set-up.

The real third-party inputs live in ``tests/fixtures/`` (copied byte-for-byte; see
``tests/fixtures/real/SOURCES.md``). An autouse fixture points HOME, XDG dirs, GPUDOC_HOME and the
working directory at a temporary place, so no test can write into the user's home or the clone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpudoc.runs.store import RunStore

pytest_plugins = ["tests._order"]  # the slowest tests first (tests/slowest.txt)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
NVIDIA_SMI = FIXTURES / "real" / "nvidia-smi"
CONFIGS = FIXTURES / "real" / "configs"
ERRORS_CORPUS = FIXTURES / "errors" / "corpus.jsonl"
MEMORY_CASES = FIXTURES / "memory" / "cases.jsonl"
SEEDS = FIXTURES / "seeds"
# The interpreter running the tests is the project's venv (bin/test): its bin/ holds the programs
# the tests drive. Not resolved through symlinks: a venv's python links to the base interpreter.
VENV_BIN = str(Path(sys.executable).parent)


def _session_root(tmp_path_factory) -> Path:
    """The temporary directory above every pytest-xdist worker's own: the session's."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    work = tmp_path_factory.mktemp("work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    # The answers gpudoc caches from the helpers it runs in a job's interpreter (a framework asked for
    # a command's reading, a simulated step), shared by the session's tests as a user's runs share
    # them: each is keyed on the interpreter, the request and the bytes of every file it read, so a
    # test sees the answer it would compute itself (an HF Trainer script costs a helper run of about
    # 9 s of CPU to read). A test of the caches themselves sets its own directory.
    monkeypatch.setenv("XDG_CACHE_HOME", str(_session_root(tmp_path_factory) / "cache"))
    monkeypatch.delenv("GPUDOC_HOME", raising=False)
    monkeypatch.delenv("GPUDOC_PROFILE", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    # The real jobs the tests start share two cores with the other pytest worker: a second OpenMP
    # thread per job only spins (measured: a fifth of the CPU a small training job costs).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # `python`, `torchrun` and `gpudoc` are the project venv's, never whatever a global
    # interpreter happens to hold (a fresh machine has none of them).
    monkeypatch.setenv("PATH", VENV_BIN + os.pathsep + os.environ.get("PATH", os.defpath))
    monkeypatch.chdir(work)
    home.chmod(0o500)  # any write into $HOME fails loudly
    yield work
    home.chmod(0o700)


def shared_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A directory ``make`` fills once per test session, for a slow real job whose result several tests
    read: the first test to ask runs it, the others (on any pytest-xdist worker) wait for it and read
    the same directory. Each worker has a temporary root of its own; the one above them is the
    session's. A ``make`` that fails leaves nothing behind: the next test to ask runs it again (and
    fails on its own account). Readers only: a test that changes what it finds works on a copy."""
    root = _session_root(tmp_path_factory)
    target, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when make() raises
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            make(target)
            done.touch()
    return target


def asked_framework_env(monkeypatch, tmp_path_factory, job: Path, cache: str, path_tail: str) -> None:
    """The environment of a module whose framework is installed beside the venv and asked in the job's
    interpreter: ``job/bin`` (its wrapped console scripts) first on PATH, then ``path_tail``; and a
    cache of the module's own (``cache``), so its answers are computed once by its first test and read
    by the others, never met from another module's questions."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / cache))
    monkeypatch.setenv("PATH", f"{job / 'bin'}:{path_tail}")


@pytest.fixture
def store(tmp_path):
    """An empty run store of the test's own, outside GPUDOC_HOME."""
    s = RunStore(tmp_path / ".gpudoc")
    s.ensure()
    return s


def gpudoc_cli(*args: str, cwd: Path | None = None, env: dict | None = None, input: str | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh interpreter (``python -m gpudoc``)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpudoc", *args],
        cwd=cwd,
        env=full_env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def console_script(bin_dir: Path, name: str, python: str, body: str = "import sys\n") -> Path:
    """A job's console script ``bin_dir/name`` whose ``#!`` names ``bin_dir/python``, a shell line
    standing in for the job's interpreter (``exec ... -S "$@"``: one without site-packages)."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(f"#!/bin/sh\n{python}\n")
    (bin_dir / name).write_text(f"#!{bin_dir}/python\n{body}")
    for made in ("python", name):
        (bin_dir / made).chmod(0o755)
    return bin_dir


def captured_workspace(cwd: Path | None = None, *, environ: dict | None = None, stdin: str = "",
                       nvml_backend: object = None, cls: type | None = None):
    """A Workspace for calling a command in-process: its console writes into StringIO buffers
    (``ws.console.out.getvalue()``), stdin is the given text, the environment is this test's
    (plus ``environ``), NVML is the given fake backend."""
    import io

    from gpudoc.output import Console
    from gpudoc.workspace import Workspace

    console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
    return (cls or Workspace)(cwd=Path(cwd or Path.cwd()), environ={**os.environ, **(environ or {})},
                              console=console, stdin=io.StringIO(stdin), nvml_backend=nvml_backend)


def call_beside_fifo(fifo: Path, call, timeout: float = 5.0):
    """``call()``'s result, asserting it returns while ``fifo`` (a named pipe it may meet) has no
    writer: a reader that opens the pipe waits forever. Unblocks such a reader before failing."""
    import threading

    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout)
        pytest.fail(f"blocked opening the FIFO {fifo.name}")
    return result[0]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs (CI runs as root)")


@pytest.fixture
def tmpfs(tmp_path):
    """A mount point; ``tmpfs(options)`` puts a fresh tmpfs on it (a small, full or read-only
    file system, as the test needs), unmounted afterwards. Needs root: mark the test ``needs_root``."""
    point = tmp_path / "mnt"
    point.mkdir()
    mounted = []

    def mount(options: str):
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True,
                              text=True)
        if done.returncode != 0:  # root without CAP_SYS_ADMIN (a locked-down container)
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def tmux_env(tmp_path_factory):
    """A private tmux server (its own socket directory), killed afterwards."""
    import shutil

    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (.ci/run installs it)")
    sock = tmp_path_factory.mktemp("tmux")
    env = {"TMUX_TMPDIR": str(sock)}
    yield env
    subprocess.run(["tmux", "kill-server"], env={**os.environ, **env}, capture_output=True)


def tmux_screen(env: dict, target: str, *, until: str | None = None, timeout: float = 20.0) -> str:
    """What a tmux pane shows; with ``until``, read again every 0.2 s until it shows that text or
    ``timeout`` seconds pass (then the last screen, for the test's own assertion to show)."""
    deadline = time.monotonic() + timeout
    while True:
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", target], env=env, capture_output=True,
                                text=True).stdout
        if until is None or until in screen or time.monotonic() >= deadline:
            return screen
        time.sleep(0.2)
