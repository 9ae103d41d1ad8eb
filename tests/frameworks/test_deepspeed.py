"""The DeepSpeed preset on the real JSONs: "auto" stays "auto" where the HF Trainer fills it."""

from __future__ import annotations

import json
import shutil

import pytest

from gpudoc.bind import apply_file_edits, plan_bindings
from gpudoc.profiles.model import Profile
from tests.conftest import CONFIGS

AUTO_JSONS = ["LLaMA-Factory__examples__deepspeed__ds_z2_offload_config.json",
              "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json",
              "LLaVA__scripts__zero3_offload.json", "axolotl__deepspeed_configs__zero2.json",
              "axolotl__deepspeed_configs__zero3_bf16_cpuoffload_all.json"]
KNOBS = {"micro_batch_size": 4, "gradient_accumulation_steps": 8, "precision": "bf16"}
HF_COMMAND = ["torchrun", "--nproc_per_node=2", "train.py", "--per_device_train_batch_size", "16",
              "--deepspeed", "ds.json"]


def _auto_keys(data, prefix=()):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _auto_keys(value, (*prefix, key))
        elif value == "auto":
            yield (*prefix, key)


@pytest.mark.parametrize("name", AUTO_JSONS)
@pytest.mark.parametrize("bound_too", [False, True], ids=["named-by-the-command", "bound-in-the-profile-too"])
def test_hf_flags_carry_the_knobs_and_the_json_keeps_auto(tmp_path, name, bound_too):
    shutil.copy(CONFIGS / name, tmp_path / "ds.json")
    original = (tmp_path / "ds.json").read_text()
    bind = {"args": "hf-trainer", **({"files": {"ds.json": "deepspeed"}} if bound_too else {})}
    plan = plan_bindings(Profile(name="t", train=KNOBS, launch={"nproc_per_node": 2}, bind=bind), HF_COMMAND,
                         cwd=tmp_path)
    assert plan.argv == ["torchrun", "--nproc_per_node=2", "train.py", "--per_device_train_batch_size", "4",
                         "--deepspeed", "ds.json", "--gradient_accumulation_steps", "8", "--bf16"]
    apply_file_edits(plan)
    after = json.loads((tmp_path / "ds.json").read_text())
    before = json.loads(original)
    # Every "auto" the Trainer fills from its flags is still "auto"; the batch keys are among them.
    assert set(_auto_keys(after)) == set(_auto_keys(before))
    assert after["train_micro_batch_size_per_gpu"] == "auto" and after["gradient_accumulation_steps"] == "auto"
    # Whatever was not "auto" and not a precision switch is byte-for-byte the same text.
    if not plan.file_edits:
        assert (tmp_path / "ds.json").read_text() == original
    for edit in plan.file_edits:
        assert {c["key"] for c in edit.changes} <= {"bf16.enabled", "fp16.enabled"}
    assert any('left train_micro_batch_size_per_gpu = "auto"' in n for n in plan.notes)
    said = plan.said()
    assert said[:3] == ["command: --per_device_train_batch_size 16 -> 4", "command: --gradient_accumulation_steps 8 added",
                        "command: --bf16 added"]
    assert len(said) == 3 + len(plan.file_edits) and all(line.startswith("ds.json: ") for line in said[3:])


def test_a_json_no_trainer_reads_gets_numbers_for_auto(tmp_path):
    # Bound in the profile but not passed as --deepspeed: nothing fills "auto", so gpudoc writes numbers.
    shutil.copy(CONFIGS / "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json", tmp_path / "ds.json")
    plan = plan_bindings(Profile(name="t", train=KNOBS, bind={"files": {"ds.json": "deepspeed"}}),
                         ["deepspeed", "--num_gpus", "1", "train.py", "--deepspeed_config", "ds.json"], cwd=tmp_path)
    apply_file_edits(plan)
    after = json.loads((tmp_path / "ds.json").read_text())
    assert (after["train_micro_batch_size_per_gpu"], after["gradient_accumulation_steps"]) == (4, 8)
    assert (after["bf16"]["enabled"], after["fp16"]["enabled"]) == (True, False)
    assert after["train_batch_size"] == "auto"


def test_a_zero3_json_without_offload_sections_reads_as_no_offload_so_the_offload_rungs_apply(tmp_path):
    # DeepSpeed's default when the section is absent is no offload; gpudoc read "unknown", and the
    # ladder had no offload rung to offer this real ZeRO-3 config.
    from gpudoc.frameworks.deepspeed import read_file as deepspeed_read
    from gpudoc.ladder import suggest
    from gpudoc.units import GIB
    from tests.ladder.helpers import no_estimate, oom

    name = "DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json"
    read = deepspeed_read(json.loads((CONFIGS / name).read_text()))
    assert (read["zero_stage"], read["offload_optimizer"], read["offload_params"]) == (3, False, False)
    stage2 = deepspeed_read({"zero_optimization": {"stage": 2}})
    assert stage2["offload_optimizer"] is False and "offload_params" not in stage2  # parameters need ZeRO-3
    assert "offload_optimizer" not in deepspeed_read({"zero_optimization": {"stage": 1}})
    assert deepspeed_read({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})[
        "offload_optimizer"] is True
    train = {"micro_batch_size": 1, "gradient_accumulation_steps": 1, "gradient_checkpointing": True, **read}
    failed = oom(requested=2 * GIB, total=80 * GIB, allocated=78 * GIB)
    rungs = [s.rung for s in suggest(failed, Profile(name="t", train=train, launch={"nproc_per_node": 8}),
                                     estimate=no_estimate).suggestions]
    assert "offload-optimizer" in rungs and "offload-params" in rungs
