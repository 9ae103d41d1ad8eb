"""The shipped examples, run for real (CPU torch) with their own profiles bound by gpudoc.bind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoc.bind import apply_file_edits, plan_bindings
from gpudoc.diagnose.text import diagnose_text
from gpudoc.profiles.from_job import job_profile
from gpudoc.profiles.loader import load_profile_file
from gpudoc.units import parse_size
from tests.conftest import REPO

EXAMPLES = REPO / "examples"


def _copy(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(EXAMPLES / name, target)
    shutil.copy(EXAMPLES / "fake_gpu.py", dest / "fake_gpu.py")  # the examples' simulated GPU, beside them
    return target


def _run(argv, cwd, env=None, timeout=120):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDOC_", "FAKE_GPU_"))}
    argv = [sys.executable if a == "python" else a for a in argv]
    return subprocess.run(argv, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def _knobs_line(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("knobs: "))
    return dict(pair.split("=", 1) for pair in line[len("knobs: "):].split())


def test_hf_style_example_gets_its_knobs_through_flags_with_no_profile(isolated_home):
    work = _copy("hf_style", isolated_home)
    assert not (work / "gpudoc.toml").exists()  # the README's first session: a plain command
    command = ["python", "train.py", "--max_seq_length", "16", "--max_steps", "2", "--fp16",
               "--per_device_train_batch_size", "8"]
    profile = job_profile(command, work)
    assert profile.train == {"micro_batch_size": 8, "gradient_accumulation_steps": 1,
                             "gradient_checkpointing": False, "precision": "fp16", "max_seq_len": 16}
    changed = profile.with_changes({"micro_batch_size": 4, "gradient_accumulation_steps": 2,
                                    "gradient_checkpointing": True, "precision": "bf16"}, {})
    plan = plan_bindings(changed.for_planning(), command, cwd=work)
    assert plan.argv == ["python", "train.py", "--max_seq_length", "16", "--max_steps", "2",
                         "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
                         "--gradient_checkpointing", "--bf16"]
    result = _run(plan.argv, work, plan.env)
    assert result.returncode == 0, result.stderr
    assert _knobs_line(result.stdout) == {"micro_batch_size": "4", "gradient_accumulation_steps": "2",
                                          "gradient_checkpointing": "true", "precision": "bf16",
                                          "max_seq_len": "16", "world_size": "1"}
    assert "step 2/2" in result.stdout and result.stdout.rstrip().endswith("done")


def test_hf_style_first_session_of_the_readme(isolated_home):
    """The README's first session, as typed: an OOM on the simulated GPU, then --retry-oom fits it."""
    work = _copy("hf_style", isolated_home)
    command = ["python", "train.py", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "2",
               "--max_steps", "1"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "FAKE_GPU_BUDGET=128 gpudoc run --retry-oom 3 -- python train.py --per_device_train_batch_size 16 " \
           "--gradient_accumulation_steps 2" in readme
    done = _run([sys.executable, "-m", "gpudoc", "run", "--no-check", "--retry-oom", "3", "--", *command], work,
                {"FAKE_GPU_BUDGET": "128", "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gpudoc: read from the command (hf-trainer): micro_batch_size = 16" in done.stderr
    assert "--retry-oom 1/3: expandable-segments+halve-micro-batch" in done.stderr
    assert "--retry-oom 2/3: halve-micro-batch (micro_batch_size 8 -> 4, gradient_accumulation_steps 4 -> 8)" \
        in done.stderr
    assert "knobs: micro_batch_size=4 gradient_accumulation_steps=8" in done.stdout
    assert not (work / "gpudoc.toml").exists()


def test_deepspeed_json_example_gets_its_knobs_through_the_file(isolated_home):
    work = _copy("deepspeed_json", isolated_home)
    original = (work / "ds_config.json").read_text()
    profile = load_profile_file(work / "gpudoc.toml")
    plan = plan_bindings(profile, ["python", "train.py", "--deepspeed_config", "ds_config.json", "--steps", "2"],
                         cwd=work)
    assert plan.conflicts == []
    assert [c["key"] for c in plan.file_edits[0].changes] == [
        "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization.stage", "bf16.enabled"]
    records = apply_file_edits(plan)
    assert Path(records[0]["backup"]).read_text() == original
    assert '"reduce_bucket_size": 5e8' in (work / "ds_config.json").read_text()
    result = _run(plan.argv, work, plan.env)
    assert result.returncode == 0, result.stderr
    assert _knobs_line(result.stdout) == {"micro_batch_size": "4", "gradient_accumulation_steps": "4",
                                          "zero_stage": "2", "offload_optimizer": "false",
                                          "offload_params": "false", "precision": "bf16", "world_size": "1"}


_OOM = re.compile(
    r"^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate (?P<req>[\d.]+ \w+)\. GPU (?P<gpu>\d+) has a "
    r"total capacity of (?P<total>[\d.]+ \w+) of which (?P<free>[\d.]+ \w+) is free\. Including non-PyTorch memory, "
    r"this process has (?P<inuse>[\d.]+ \w+) memory in use\. Of the allocated memory (?P<alloc>[\d.]+ \w+) is "
    r"allocated by PyTorch, and (?P<resv>[\d.]+ \w+) is reserved by PyTorch but unallocated\. If reserved but "
    r"unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    r"fragmentation\.  See documentation for Memory Management  "
    r"\(https://pytorch\.org/docs/stable/notes/cuda\.html#environment-variables\)$", re.M)


def test_env_example_reads_gpudoc_variables_and_its_simulated_oom_is_a_real_format_message(isolated_home):
    work = _copy("env_knobs", isolated_home)
    plan = plan_bindings(load_profile_file(work / "gpudoc.toml"), ["python", "train.py"], cwd=work)
    assert plan.env["GPUDOC_MICRO_BATCH_SIZE"] == "16" and plan.argv == ["python", "train.py"]
    result = _run(plan.argv, work, {**plan.env, "FAKE_GPU_BUDGET": "64"})  # 16 x 8 = 128 > 64
    assert _knobs_line(result.stdout)["micro_batch_size"] == "16"  # the profile's binding, read by the job
    assert result.returncode == 1
    assert "Traceback (most recent call last):" in result.stderr
    m = _OOM.search(result.stderr)
    assert m, result.stderr
    size = {k: parse_size(v) for k, v in m.groupdict().items() if k != "gpu"}
    mib = 1024 ** 2
    assert size["total"] == 24 * 1024 ** 3
    assert abs(size["free"] + size["inuse"] - size["total"]) <= 0.02 * 1024 ** 3
    assert abs(size["alloc"] + size["resv"] + 512 * mib - size["inuse"]) <= 0.02 * 1024 ** 3
    assert size["req"] > size["free"]
    diagnosis = diagnose_text(result.stderr, exit_code=1)
    assert diagnosis.cause == "gpu_oom" and diagnosis.gpu_index == 0
    # Halving the micro batch fits the same budget: what the ladder's first batch rung does.
    ok = _run(plan.argv, work, {**plan.env, "GPUDOC_MICRO_BATCH_SIZE": "8", "GPUDOC_STEPS": "2",
                                "FAKE_GPU_BUDGET": "64"})
    assert ok.returncode == 0, ok.stderr
    assert _knobs_line(ok.stdout)["micro_batch_size"] == "8" and "step 2/2" in ok.stdout


@pytest.mark.parametrize("knob_env,fits", [
    ({"GPUDOC_GRADIENT_CHECKPOINTING": "true"}, True),
    ({"GPUDOC_PRECISION": "bf16"}, True),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
])
def test_env_example_memory_levers(isolated_home, knob_env, fits):
    work = _copy("env_knobs", isolated_home)
    env = {"GPUDOC_MICRO_BATCH_SIZE": "16", "GPUDOC_MAX_SEQ_LEN": "8", "GPUDOC_STEPS": "1",
           "FAKE_GPU_BUDGET": "64", **knob_env}
    result = _run(["python", "train.py"], work, env)
    assert (result.returncode == 0) is fits, result.stderr
    if not fits:  # expandable segments: the OOM stays, fragmentation shrinks to a few MiB
        m = _OOM.search(result.stderr)
        assert parse_size(m["resv"]) <= 20 * 1024 ** 2


def test_env_example_under_torchrun_two_ranks(isolated_home):
    work = _copy("env_knobs", isolated_home)
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun) if torchrun.exists() else "torchrun", "--standalone", "--nproc_per_node", "2", "train.py"]
    result = _run(argv, work, {"GPUDOC_MICRO_BATCH_SIZE": "2", "GPUDOC_STEPS": "1", "OMP_NUM_THREADS": "1"},
                  timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "step 1/1" in result.stdout


def test_env_example_without_torch_says_how_to_get_it(isolated_home, tmp_path):
    # A Python with nothing installed (what a new user's `python` may well be).
    bare = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(bare)],
                   check=True, timeout=120)
    work = _copy("env_knobs", isolated_home)
    done = _run([str(bare / "bin" / "python"), "train.py"], work, {"GPUDOC_STEPS": "1"})
    assert done.returncode == 2
    assert done.stderr.strip() == ("train.py: this example trains a tiny model with PyTorch, which this Python "
                                   "lacks: `python -m pip install torch` (the CPU build is enough)")
    # Over the simulated budget it fails as a GPU OOM before needing torch at all.
    over = _run([str(bare / "bin" / "python"), "train.py"], work, {"FAKE_GPU_BUDGET": "1"})
    assert over.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory" in over.stderr
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "python -m pip install torch" in readme and "examples/env_knobs" in readme


def _mamba(tmp_path) -> Path:
    cwd = _copy("mamba_lm", tmp_path)
    profile = cwd / "gpudoc.toml"
    # The test's time: the selective scan is a Python loop over the sequence, in training and simulated.
    profile.write_text(profile.read_text().replace("max_seq_len = 512", "max_seq_len = 8"))
    return cwd


def test_mamba_example_trains_with_the_knobs_of_its_profile(isolated_home, tmp_path):
    cwd = _mamba(tmp_path)
    ran = _run(["gpudoc", "run", "--no-check", "--", "python", "train.py"], cwd, env={"GPUDOC_STEPS": "2"})
    assert ran.returncode == 0, ran.stderr
    losses = [float(m) for m in re.findall(r"step \d: loss ([\d.]+) micro_batch_size=4 max_seq_len=8", ran.stdout)]
    assert len(losses) == 2 and all(0 < loss < 20 for loss in losses)  # ln(50257) = 10.8 at the start


def test_mamba_example_is_estimated_by_simulating_its_own_code(isolated_home, tmp_path):
    """The formula cannot estimate selective scans and says how to get an answer; the profile's factory
    and `[estimate] simulate` give one, from the example's own model code."""
    import importlib.util
    import json

    import torch

    cwd = _mamba(tmp_path)
    ran = _run(["gpudoc", "estimate", "--json", "--python", sys.executable], cwd)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["source"] == "simulation" and doc["versions"]["torch"] == torch.__version__, doc["notes"]
    spec = importlib.util.spec_from_file_location("mamba_example_model", cwd / "model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.device("meta"):
        params = list(module.build(1, 8)[0].parameters())
    fp32 = sum(4 * p.numel() for p in params)  # fp16 autocast keeps fp32 weights
    assert fp32 <= doc["breakdown"]["weights"] < fp32 + 512 * len(params)
    assert doc["breakdown"]["optimizer"] >= 2 * fp32  # AdamW's two fp32 states
    assert doc["max_micro_batch_size"] > 4 and doc["fit"] == "fits"
    # At 4 x 8 tokens the tied embedding's gradients, not the activations, set the peak: said so.
    assert any("does not grow with the batch sets the peak there" in n for n in doc["notes"]), doc["notes"]

    (cwd / "formula.toml").write_text((cwd / "gpudoc.toml").read_text().replace("simulate = true", "simulate = false"))
    formula = _run(["gpudoc", "estimate", "-p", "formula.toml"], cwd)
    assert formula.returncode == 2 and "Traceback" not in formula.stderr
    assert "not selective scans; [model] factory" in formula.stderr and "--simulate" in formula.stderr
