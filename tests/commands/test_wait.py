"""`gpudoc run --wait[=SECONDS]`: a real launch behind a GPU that another job frees, fed by the fake
NVML over the real T4 capture (its two processes are another machine's: holders gpudoc never
touches), and the waiting loop on its own with a clock of the test's."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from gpudoc.commands.run_options import parse_fast
from gpudoc.commands.wait import status, wait_for_memory, wait_limit
from gpudoc.errors import GpudocError
from gpudoc.findings import Finding, Severity
from tests.conftest import REPO, gpudoc_cli

# The T4 capture: 15 GiB, about 13.6 GiB free while its two processes hold 1 GiB.
JOB = """
import io, sys
from dataclasses import replace
from gpudoc.commands import wait
from gpudoc.commands.run import RunOptions, run
from gpudoc.errors import GpudocError
from gpudoc.facts.smi_files import load_snapshot
from gpudoc.output import Console
from gpudoc.workspace import Workspace
from tests.facts.fake_nvml import FakeNvml
from tests.conftest import NVIDIA_SMI

wait.POLL_S = 0.05
busy = load_snapshot([NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml"])
freed = replace(busy, gpus=tuple(replace(g, processes=(), memory_used_bytes=0, memory_free_bytes=g.memory_total_bytes)
                                 for g in busy.gpus))

class FreedLater(FakeNvml):
    # The other job ends after {busy_reads} reads of the driver.
    reads = 0

    def nvmlInit(self):
        FreedLater.reads += 1
        self.facts = busy if FreedLater.reads <= {busy_reads} else freed
        super().nvmlInit()

err = io.StringIO()
try:
    status = run(RunOptions(command=[sys.executable, "-c", "print('launched')"], wait={wait!r}),
                 Workspace(console=Console(out=sys.stdout, err=err), nvml_backend=FreedLater(busy)))
    print("STATUS", status)
except GpudocError as exc:
    print("REFUSED", int(exc.exit_status), exc)
print("READS", FreedLater.reads)
print(err.getvalue())
"""


def launch(work, *, need_gib: float, wait: str | None, busy_reads: int = 3) -> str:
    (work / "gpudoc.toml").write_text(f"[gpu]\nmin_free_gib = {need_gib}\n")
    done = subprocess.run([sys.executable, "-c", JOB.format(wait=wait, busy_reads=busy_reads)], cwd=work,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_the_job_starts_once_another_job_frees_the_memory(isolated_home):
    out = launch(isolated_home, need_gib=14.5, wait="inf")
    assert "STATUS 0" in out and "launched" in out
    assert "READS 4" in out  # three busy reads waited through, the fourth launched
    said = [line for line in out.splitlines() if "--wait" in line]
    # Not a terminal: the status line is written once, then the start, with the bell.
    assert len(said) == 2, said
    assert said[0].startswith("gpudoc: --wait: GPU 0: 13.6 GiB free") and "the job needs 14.5 GiB" in said[0]
    assert "PID 5762" in said[0]  # who holds it, from the driver's list
    assert said[1].startswith("\agpudoc: --wait: the memory is free after ")


def test_at_its_limit_wait_refuses_naming_who_holds_the_memory(isolated_home):
    out = launch(isolated_home, need_gib=14.5, wait="0.3", busy_reads=10**6)
    assert "REFUSED 125 --wait: gave up after 0.3 s: GPU 0: 13.6 GiB free" in out and "PID 5762" in out
    assert "launched" not in out


def test_a_card_too_small_is_refused_at_once_however_long_the_wait(isolated_home):
    out = launch(isolated_home, need_gib=20, wait="inf", busy_reads=10**6)
    assert "REFUSED 125 pre-flight checks failed (gpu.free-memory)" in out
    assert "READS 1" in out and "gpudoc: --wait:" not in out


def test_without_wait_the_refusal_says_wait_would_help(isolated_home):
    out = launch(isolated_home, need_gib=14.5, wait=None)
    assert "REFUSED 125" in out and "--wait waits for free memory" in out


def _finding(title: str, *holders: str, detail: str = "") -> Finding:
    return Finding("gpu.free-memory", Severity.FAIL, title, detail, "", holders=holders)


def test_on_a_terminal_the_status_line_is_refreshed_in_place():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    answers = iter([("f", [_finding("GPU 0: 1.0 GiB free", "PID 9 holds 1 GiB")], True)] * 3
                   + [("f", [], True)])
    now = iter(range(100))
    err = Terminal()
    facts, findings = wait_for_memory(lambda: next(answers), float("inf"), err, poll_s=1,
                                      clock=lambda: float(next(now)), sleep=lambda _: None)
    assert (facts, findings) == ("f", [])
    text = err.getvalue()
    assert text.count("\r\x1b[K") == 3 and "GPU 0: 1.0 GiB free — PID 9 holds 1 GiB (waiting 1.0 s)" in text
    assert text.endswith("\n\agpudoc: --wait: the memory is free after 4.0 s: launching\n")


def test_a_check_that_waiting_cannot_fix_ends_the_wait():
    other = Finding("host.disk", Severity.FAIL, "no disk", "", "")
    answers = iter([("f", [_finding("GPU 0: 1.0 GiB free")], True), ("g", [_finding("x"), other], True)])
    facts, findings = wait_for_memory(lambda: next(answers), float("inf"), io.StringIO(), poll_s=0,
                                      sleep=lambda _: None)
    assert facts == "g" and other in findings  # the gate refuses on it, as without --wait


def test_status_names_each_gpu_and_its_holders():
    assert status([_finding("GPU 0: 1 GiB free", "PID 9 holds 1 GiB", "PID 12 holds 2 GiB; it has the GPU's "
                            "device file open"), _finding("GPU 1: 0 free")]) == (
        "GPU 0: 1 GiB free — PID 9 holds 1 GiB; PID 12 holds 2 GiB; it has the GPU's device file open; GPU 1: 0 free")


def test_status_takes_the_holders_from_the_finding_not_from_its_detail_text():
    # A detail worded otherwise (or none) changes nothing; a "; " in it is no holder.
    assert status([_finding("GPU 0: 1 GiB free", "PID 9 holds 1 GiB", detail="")]) == (
        "GPU 0: 1 GiB free — PID 9 holds 1 GiB")
    assert status([_finding("GPU 1: 0 free", detail="total 2 GiB; no process listed")]) == "GPU 1: 0 free"


def test_the_free_memory_check_gives_its_holders_apart_from_its_detail():
    from gpudoc.checks._common import CheckContext
    from gpudoc.checks.memory import check_free_memory
    from tests.checks._real import profile, snap

    facts = snap("telegraf__plugins__inputs__nvidia_smi__testdata__tesla-t4.xml", live=True)
    (failed,) = [f for f in check_free_memory(facts, profile(gpu={"min_free_gib": 14.5}), CheckContext())
                 if f.severity is Severity.FAIL]
    assert failed.holders and all(f"; {holder}" in failed.detail for holder in failed.holders)
    assert "PID 5762" in failed.holders[0] and status([failed]).endswith(" — " + "; ".join(failed.holders))


@pytest.mark.parametrize(("given", "seconds"), [(None, None), ("inf", float("inf")), ("600", 600.0), ("0.5", 0.5)])
def test_the_limit_in_seconds(given, seconds):
    assert wait_limit(given) == seconds


@pytest.mark.parametrize("given", ["0", "-5", "abc", "nan", ""])
def test_a_limit_that_is_not_a_time_is_refused_with_125(given):
    with pytest.raises(GpudocError, match="--wait: expected a number of seconds") as caught:
        wait_limit(given)
    assert int(caught.value.exit_status) == 125


def test_wait_alone_takes_no_argument_of_the_command():
    options = parse_fast(["--wait", "python", "train.py", "--wait", "3"])
    assert options is not None and options.wait == "inf" and options.command == ["python", "train.py", "--wait", "3"]
    assert parse_fast(["--wait=90", "--", "true"]).wait == "90"
    assert parse_fast(["--wait", "--", "true"]).to_argv() == ["run", "--wait", "--", "true"]


def test_the_full_parser_reads_wait_alone_and_with_a_value():
    for switch in ("--wait", "--wait=1"):
        done = gpudoc_cli("run", switch, "--no-check", "--json", "--", sys.executable, "-c", "print('ran')")
        assert done.returncode == 0, done.stderr
    bad = gpudoc_cli("run", "--wait=soon", "--no-check", "--", "true")
    assert bad.returncode == 125 and bad.stderr.strip().count("\n") == 0 and "--wait: expected" in bad.stderr


PICK = """
import io, os, sys
from dataclasses import replace
from gpudoc.commands import wait
from gpudoc.commands.run import RunOptions, run
from gpudoc.facts.smi_files import load_snapshot
from gpudoc.output import Console
from gpudoc.workspace import Workspace
from tests.facts.fake_nvml import FakeNvml
from tests.conftest import NVIDIA_SMI

wait.POLL_S = 0.05
# Both cards of the real dual-A5000 capture busy; the second one's job has ended.
busy = load_snapshot([NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"])
gpus = [replace(g, processes=(), memory_used_bytes=0, memory_free_bytes=g.memory_total_bytes) if g.index == 1 else g
        for g in busy.gpus]
err = io.StringIO()
status = run(RunOptions(command=[sys.executable, "-c", "import os; print('ON', os.environ['CUDA_VISIBLE_DEVICES'])"],
                        wait="inf"),
             Workspace(console=Console(out=sys.stdout, err=err), nvml_backend=FakeNvml(replace(busy, gpus=tuple(gpus)))))
print("STATUS", status, "UUID1", gpus[1].uuid)
print(err.getvalue())
"""


def test_a_job_needing_fewer_gpus_than_the_machine_has_takes_the_free_ones_by_uuid(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[gpu]\nmin_free_gib = 20\n[launch]\nnproc_per_node = 1\n")
    done = subprocess.run([sys.executable, "-c", PICK], cwd=isolated_home, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in {**os.environ, "PYTHONPATH": str(REPO)}.items()
                                            if k != "CUDA_VISIBLE_DEVICES"})
    out = done.stdout
    assert "STATUS 0" in out, out + done.stderr
    uuid = out.split("UUID1 ", 1)[1].split()[0]
    assert uuid.startswith("GPU-") and f"ON {uuid}\n" in out  # the job saw the free card, by its UUID
    assert f"gpudoc: --wait: the job runs on the GPUs with the memory free: CUDA_VISIBLE_DEVICES={uuid}" in out
    assert "gpudoc: --wait: GPU" not in out  # no wait: the free card was there at once


def test_the_gate_reads_the_driver_and_runs_the_checks_once_a_poll(isolated_home, monkeypatch):
    """The PICK case in-process, with spies: the job's default GPU is busy, the other one free; the
    gate takes it, judging it in the one snapshot it read, with one run of the checks."""
    from dataclasses import replace

    import gpudoc.checks
    from gpudoc.commands.run import RunOptions, run
    from gpudoc.facts.smi_files import load_snapshot
    from tests.conftest import NVIDIA_SMI, captured_workspace
    from tests.facts.fake_nvml import FakeNvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (isolated_home / "gpudoc.toml").write_text("[gpu]\nmin_free_gib = 20\n[launch]\nnproc_per_node = 1\n")
    busy = load_snapshot([NVIDIA_SMI / "telegraf__plugins__inputs__nvidia_smi__testdata__dual_a5000-v13.xml"])
    gpus = tuple(replace(g, processes=(), memory_used_bytes=0, memory_free_bytes=g.memory_total_bytes)
                 if g.index == 1 else g for g in busy.gpus)
    checks, reads = [], []
    real_checks = gpudoc.checks.run_checks
    monkeypatch.setattr(gpudoc.checks, "run_checks", lambda *a, **k: checks.append(1) or real_checks(*a, **k))

    class Counted(FakeNvml):
        def nvmlInit(self):
            reads.append(1)
            super().nvmlInit()

    ws = captured_workspace(isolated_home, nvml_backend=Counted(replace(busy, gpus=gpus)))
    assert run(RunOptions(command=[sys.executable, "-c", "pass"], wait="inf"), ws) == 0, ws.console.err.getvalue()
    assert f"CUDA_VISIBLE_DEVICES={gpus[1].uuid}" in ws.console.err.getvalue()
    assert (len(reads), len(checks)) == (1, 1)
