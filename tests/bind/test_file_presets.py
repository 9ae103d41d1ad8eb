"""File presets on the real configs: a preset's value is type-checked like an explicit binding's
(DeepSpeed's "auto" excepted), and a file a preset reaches twice is bound once."""

from __future__ import annotations

import pytest

from gpudoc.bind import plan_bindings
from gpudoc.errors import ProfileError
from gpudoc.profiles.model import Profile
from tests.conftest import CONFIGS

BATCH = {"micro_batch_size": 4, "gradient_accumulation_steps": 8}

# (fixture, name, preset, the value's line as written, the same value as a string, the key)
STRINGS = [
    ("axolotl__deepspeed_configs__zero2.json", "ds.json", "deepspeed",
     '"train_micro_batch_size_per_gpu": "auto"', '"train_micro_batch_size_per_gpu": "8"',
     "train_micro_batch_size_per_gpu", '"8"'),
    ("axolotl__examples__llama-2__qlora.yml", "qlora.yml", "axolotl",
     "micro_batch_size: 2\n", 'micro_batch_size: "2"\n', "micro_batch_size", '"2"'),
]


def _refusal(work, profile) -> str:
    with pytest.raises(ProfileError) as err:
        plan_bindings(profile, ["python", "train.py"], cwd=work)
    return str(err.value)


@pytest.mark.parametrize("case", STRINGS, ids=[c[2] for c in STRINGS])
def test_a_preset_refuses_a_number_over_a_string_as_an_explicit_binding_does(case, tmp_path):
    fixture, name, preset, line, quoted, key, shown = case
    text = (CONFIGS / fixture).read_text()
    assert line in text
    (tmp_path / name).write_text(text.replace(line, quoted))
    before = (tmp_path / name).read_bytes()
    by_preset = _refusal(tmp_path, Profile(name="t", train=BATCH, bind={"files": {name: preset}}))
    explicit = _refusal(tmp_path, Profile(name="t", train=BATCH, bind={"files": {name: {"micro_batch_size": key}}}))
    assert by_preset == f"{name}: {key} holds the string {shown}; micro_batch_size = 4 is an integer, not a string"
    assert explicit.endswith(by_preset)  # one check, one message (the explicit one says which binding)
    assert (tmp_path / name).read_bytes() == before


def test_a_preset_still_replaces_deepspeeds_auto(tmp_path):
    (tmp_path / "ds.json").write_bytes((CONFIGS / "axolotl__deepspeed_configs__zero2.json").read_bytes())
    plan = plan_bindings(Profile(name="t", train=BATCH, bind={"files": {"ds.json": "deepspeed"}}),
                         ["python", "train.py"], cwd=tmp_path)
    assert plan.file_edits[0].changes == [
        {"key": "train_micro_batch_size_per_gpu", "old": "auto", "new": 4},
        {"key": "gradient_accumulation_steps", "old": "auto", "new": 8}]


def test_nemo_precision_takes_a_string_where_the_file_has_a_number(tmp_path):
    fixture = "NeMo__examples__nlp__language_modeling__conf__megatron_gpt_config.yaml"
    (tmp_path / "gpt.yaml").write_bytes((CONFIGS / fixture).read_bytes())
    plan = plan_bindings(Profile(name="t", train={"precision": "bf16"}, bind={"files": {"gpt.yaml": "nemo"}}),
                         ["python", "train.py"], cwd=tmp_path)
    assert plan.file_edits[0].changes == [{"key": "trainer.precision", "old": 16, "new": "bf16"}]


@pytest.mark.parametrize("named_by", ["command", "script"])
def test_hf_mode_lists_a_deepspeed_json_bound_twice_once(named_by, tmp_path):
    text = (CONFIGS / "DeepSpeedExamples__Megatron-LM__scripts__ds_zero-offload_10B_config.json").read_text()
    (tmp_path / "ds.json").write_text(text.replace('"train_batch_size":30', '"train_batch_size":"auto"'))
    if named_by == "command":
        bind = {"args": "hf-trainer", "files": {"ds.json": "deepspeed"}}
        command = ["python", "train.py", "--deepspeed", "ds.json"]
    else:
        (tmp_path / "train.sh").write_text("python train.py --deepspeed ds.json\n")
        bind = {"files": {"train.sh": "hf-trainer", "ds.json": "deepspeed"}}
        command = ["bash", "train.sh"]
    plan = plan_bindings(Profile(name="t", train={**BATCH, "zero_stage": 2}, bind=bind), command, cwd=tmp_path)
    in_file = [(b["knob"], b["key"]) for b in plan.bindings if b["file"] == "ds.json"]
    assert in_file == [("micro_batch_size", "train_micro_batch_size_per_gpu"),
                       ("gradient_accumulation_steps", "gradient_accumulation_steps"),
                       ("zero_stage", "zero_optimization.stage")]
    edit = next(e for e in plan.file_edits if e.label == "ds.json")
    assert [c["key"] for c in edit.changes] == ["train_micro_batch_size_per_gpu", "gradient_accumulation_steps"]
