"""A config checked out with CRLF line endings keeps them through an edit (and a missing final
newline stays missing): only the bound values' characters change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpudoc.bind import apply_file_edits, plan_bindings
from gpudoc.profiles.model import Profile
from tests.conftest import CONFIGS, gpudoc_cli

BATCH = {"micro_batch_size": 4, "gradient_accumulation_steps": 8}

# (fixture, name in the work dir, preset, knobs)
CASES = [
    ("axolotl__deepspeed_configs__zero2.json", "ds.json", "deepspeed", BATCH),
    # No final newline, and a key the preset adds (a new line).
    ("DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json", "ds.json", "deepspeed",
     {**BATCH, "zero_stage": 2, "offload_optimizer": True}),
    ("axolotl__examples__llama-2__qlora.yml", "qlora.yml", "axolotl", {**BATCH, "lora_rank": 16}),
    ("nanoGPT__config__finetune_shakespeare.py", "finetune.py", "nanogpt", {**BATCH, "precision": "fp16"}),
    ("torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", "tt.yaml", "torchtune",
     {**BATCH, "lora_rank": 16, "gradient_checkpointing": False}),
]


def _crlf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def _edited(work: Path, fixture: str, target: str, preset: str, knobs: dict, convert) -> bytes:
    dest = work / target
    dest.write_bytes(convert((CONFIGS / fixture).read_bytes()))
    profile = Profile(name="t", train=knobs, launch={"nproc_per_node": 1},
                      bind={"env": False, "files": {target: preset}})
    plan = plan_bindings(profile, ["python", "train.py"], cwd=work)
    apply_file_edits(plan)
    return dest.read_bytes()


@pytest.mark.parametrize("case", CASES, ids=[c[0].split("__")[-1] for c in CASES])
def test_a_crlf_config_keeps_crlf_on_every_line(case, tmp_path):
    fixture, target, preset, knobs = case
    (tmp_path / "lf").mkdir()
    (tmp_path / "crlf").mkdir()
    lf = _edited(tmp_path / "lf", fixture, target, preset, knobs, lambda b: b)
    crlf = _edited(tmp_path / "crlf", fixture, target, preset, knobs, _crlf)
    assert lf != (CONFIGS / fixture).read_bytes()  # the preset did edit the file
    assert b"\r" not in lf
    assert crlf == _crlf(lf)  # the same edit, every line still CRLF, the final newline as it was
    backup = tmp_path / "crlf" / (target + ".gpudoc.bak")
    assert backup.read_bytes() == _crlf((CONFIGS / fixture).read_bytes())


def test_a_file_that_mixes_endings_keeps_each_lines_own(tmp_path):
    (tmp_path / "ds.json").write_bytes(b'{\r\n  "train_micro_batch_size_per_gpu": 2,\n'
                                       b'  "gradient_accumulation_steps": 1\r\n}')
    profile = Profile(name="t", train=BATCH, bind={"env": False, "files": {"ds.json": "deepspeed"}})
    apply_file_edits(plan_bindings(profile, ["python", "train.py"], cwd=tmp_path))
    assert (tmp_path / "ds.json").read_bytes() == (b'{\r\n  "train_micro_batch_size_per_gpu": 4,\n'
                                                   b'  "gradient_accumulation_steps": 8\r\n}')


def test_a_crlf_toml_config_keeps_crlf(tmp_path):
    (tmp_path / "cfg.toml").write_bytes(b"# run\r\n[train]\r\nbs = 2  # per GPU\r\naccum = 1")
    profile = Profile(name="t", train=BATCH, bind={"env": False, "files": {"cfg.toml": {
        "micro_batch_size": "train.bs", "gradient_accumulation_steps": "train.accum"}}})
    apply_file_edits(plan_bindings(profile, ["python", "train.py"], cwd=tmp_path))
    assert (tmp_path / "cfg.toml").read_bytes() == b"# run\r\n[train]\r\nbs = 4  # per GPU\r\naccum = 8"


def test_gpudoc_run_keeps_a_crlf_deepspeed_config(isolated_home):
    work = isolated_home
    original = _crlf((CONFIGS / "axolotl__deepspeed_configs__zero2.json").read_bytes())
    (work / "ds.json").write_bytes(original)
    (work / "gpudoc.toml").write_text('[train]\nmicro_batch_size = 4\ngradient_accumulation_steps = 8\n'
                                      '[bind.files]\n"ds.json" = "deepspeed"\n')
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "print(1)", cwd=work,
                      env={"GPUDOC_HOME": str(work / ".gpudoc-home")})
    assert done.returncode == 0, done.stderr
    expected = original.replace(b'"gradient_accumulation_steps": "auto"', b'"gradient_accumulation_steps": 8') \
        .replace(b'"train_micro_batch_size_per_gpu": "auto"', b'"train_micro_batch_size_per_gpu": 4')
    assert expected != original
    assert (work / "ds.json").read_bytes() == expected
    assert (work / "ds.json.gpudoc.bak").read_bytes() == original
