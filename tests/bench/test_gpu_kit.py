"""The GPU validation kit (bench/gpu/) kept from rotting between the sessions that are lent a GPU: its
whole plan runs here with ``--cpu`` (every CUDA section skipped, the rest for real), a section that
outruns its limit is stopped with its figures kept, a missing wheel fails every section in one line,
and ``prepare`` carries what the lent machine lacks and nothing it has."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, shared_once

KIT = REPO / "bench" / "gpu"
sys.path.insert(0, str(KIT / "kit"))

import grid  # noqa: E402  (the kit's modules sit beside its scripts, not in a package)
import main as kit_main  # noqa: E402
import prepare  # noqa: E402
import runner  # noqa: E402
import sec_oom_chain  # noqa: E402

pytestmark = pytest.mark.slow


def validate(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KIT / "validate"), *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def cpu_report(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The whole plan on the CPU, run once per session (minutes of CPU): every test here reads it."""
    def make(where: Path) -> None:
        done = validate("--cpu", "--out", str(where / "out"))
        (where / "done.json").write_text(json.dumps([done.returncode, done.stdout, done.stderr]))

    where = shared_once(tmp_path_factory, "gpu-kit-cpu-plan", make)
    returncode, stdout, stderr = json.loads((where / "done.json").read_text())
    return subprocess.CompletedProcess([], returncode, stdout, stderr), where / "out"


def test_the_cpu_plan_runs_every_section_and_fails_none(cpu_report):
    done, out = cpu_report
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert list(report["sections"]) == list(runner.SECTIONS)
    for name, section in report["sections"].items():
        assert section["status"] in ("pass", "skipped"), (name, section)
        assert section["reason"], name
        assert 0 < section["seconds"] <= section["limit_s"], name
    assert report["kit"]["mode"] == "cpu" and report["kit"]["gpudoc"].startswith("gpudoc ")
    summary = (out / "summary.txt").read_text()
    assert summary == done.stdout
    assert all(f"\n{name} " in summary for name in runner.SECTIONS)
    # At most 8 files come back from a device call, each under 16 MiB.
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(p.stat().st_size < 16 * 2**20 for p in files)


def test_the_cpu_plan_runs_what_needs_no_gpu(cpu_report):
    _, out = cpu_report
    sections = json.loads((out / "report.json").read_text())["sections"]
    check = sections["check"]
    assert check["gpus"] == [] and check["summary"]["fail"] >= 1  # the real check: no driver here
    assert "driver.nvml" in " ".join(check["failing_findings"])
    estimate = sections["estimate"]["cases"]
    assert set(estimate) == {c["id"] for c in grid.cases()}
    for case_id, entry in estimate.items():
        assert entry["formula"]["source"] == "formula", case_id
        assert entry["formula"]["peak_bytes"] > 0, case_id
    # The grid's own arithmetic, through gpudoc: checkpointing and a LoRA adapter both cost less.
    peak = {case_id: entry["formula"]["peak_bytes"] for case_id, entry in estimate.items()}
    assert peak["gpt2-bf16-ckpt-s1024-mb8"] < peak["gpt2-bf16-s1024-mb8"]
    assert peak["llama1b-lora-bf16-s2048-mb4"] < peak["llama1b-bf16-s2048-mb2"] * 2
    assert peak["llama1b-bf16-s2048-mb1"] < peak["llama1b-bf16-s2048-mb2"]
    read = sections["oom_chain"]["read_before_launch"]
    assert read["micro_batch_size"] == {"value": sections["oom_chain"]["sizing"]["first_micro_batch_size"],
                                        "where": "argv:--per_device_train_batch_size"}
    assert read["precision"]["value"] == "bf16"
    variants = sections["overhead"]["variants"]
    assert set(variants) == {"bare", "pipe"}
    assert all(v["seconds_per_step"] > 0 for v in variants.values())
    assert "tune" in sections["tune"]["reason"]


def test_only_reruns_the_sections_named(tmp_path):
    done = validate("--cpu", "--out", str(tmp_path), "--only", "tune", timeout=120)
    assert done.returncode == 0, done.stderr
    assert list(json.loads((tmp_path / "report.json").read_text())["sections"]) == ["tune"]


def test_without_the_wheels_every_section_fails_in_one_line(tmp_path):
    empty = tmp_path / "wheels"
    empty.mkdir()
    done = validate("--out", str(tmp_path / "out"), "--wheels", str(empty), timeout=60)
    assert done.returncode == 1
    sections = json.loads((tmp_path / "out" / "report.json").read_text())["sections"]
    assert list(sections) == list(runner.SECTIONS)
    assert {s["status"] for s in sections.values()} == {"fail"}
    assert all("no gpudoc wheel" in s["reason"] and "bench/gpu/prepare" in s["reason"] for s in sections.values())


def _processes_naming(path: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(path) in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def test_a_command_past_its_limit_is_ended_with_its_whole_process_group(tmp_path):
    kit = runner.Kit(cpu=True, work=tmp_path, state=tmp_path, pythonpath=str(REPO), deadline=time.time() + 60)
    marker = tmp_path / "still-here"
    started = time.monotonic()
    done = kit.run(["sh", "-c", f"sleep 30 & sleep 30; touch {marker}"], timeout=1)
    assert done.timed_out and time.monotonic() - started < 1 + 4
    time.sleep(0.3)
    assert _processes_naming(tmp_path) == [] and not marker.exists()


def test_a_section_given_too_little_time_fails_saying_so_and_leaves_no_process(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    kit = runner.Kit(cpu=True, work=tmp_path / "work", state=state, pythonpath=str(REPO))
    kit.work.mkdir()
    started = time.monotonic()
    section = kit_main.run_section(kit, "overhead", limit=3)
    assert time.monotonic() - started < 3 + 5 + 4  # the limit, the grace, SIGTERM's wait
    assert section["status"] == "fail" and section["limit_s"] == 3
    assert "time limit (3 s)" in section["reason"] or "no time left for bare" in section["reason"]
    time.sleep(0.3)
    assert _processes_naming(kit.work) == []


def test_prepare_carries_what_the_machine_lacks_and_nothing_it_has(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["psutil>=5.9", "nvidia-ml-py>=12", "plumbum>=2,<3", '
                         '"tomli>=2.0; python_version < \'3.11\'", "tomlkit>=0.12", "no-such-package-here>=1"]\n')
    on_312 = prepare.requirements(pyproject, python="3.12")
    names = [prepare.canonical(r.split("=")[0].split(">")[0]) for r in on_312]
    assert names == ["plumbum", "tomlkit", "no-such-package-here"]
    # Pinned to what this checkout's tests run with; a package not installed here keeps its range.
    assert on_312[0] == f"plumbum=={__import__('importlib.metadata').metadata.version('plumbum')}"
    assert on_312[-1] == "no-such-package-here>=1"
    assert "tomli" in [prepare.canonical(r.split(">")[0].split("=")[0]) for r in
                       prepare.requirements(pyproject, python="3.9")]


def test_the_device_call_leaves_time_to_rerun_and_carries_an_ignored_folder():
    call = prepare.device_call()
    # The plan, the install and start-up inside one call; two calls and two starts inside 15 minutes.
    assert runner.TOTAL_S + 30 <= call["timeout_s"] <= 600
    assert sum(runner.LIMITS_S.values()) <= runner.TOTAL_S <= 270
    assert 2 * call["timeout_s"] + 2 * 120 <= 15 * 60
    assert call["command"].endswith("bench/gpu/validate")
    ignored = subprocess.run(["git", "check-ignore", "-q", call["carry"][0] + "/x.whl"], cwd=REPO)
    assert ignored.returncode == 0, "the wheels folder must be ignored by git, so only carry brings it"


def test_the_device_run_holds_the_record_to_the_allocators_own_step_figures():
    """What the oom_chain section asks of the run that fits, on the record a GPU run makes: the probe's
    step events as a CUDA job writes them (running peaks, the capacity at the first step)."""
    from gpudoc.runs.steps import from_probe

    events = [{"n": n, "seconds": 0.2 if n > 1 else None, "peak_allocated": 30 * 2**30, "peak_reserved": 32 * 2**30,
               **({"capacity": 80 * 2**30} if n == 1 else {})} for n in (1, 2, 3)]
    assert sec_oom_chain._allocator_steps(from_probe(events, {}, None))
    # A CPU run's steps (no allocator) or a reserved figure below the allocated one fail the check.
    cpu = [{k: v for k, v in e.items() if k == "n" or k == "seconds"} for e in events]
    assert not sec_oom_chain._allocator_steps(from_probe(cpu, {}, None))
    assert not sec_oom_chain._allocator_steps(from_probe([{**e, "peak_reserved": 2**30} for e in events], {}, None))
