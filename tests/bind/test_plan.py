"""plan_bindings / apply_file_edits: env, placeholders, explicit key paths, conflicts, atomicity."""

from __future__ import annotations

import json
import resource
import shutil
import signal
from pathlib import Path

import pytest
import tomllib

from gpudoc.bind import apply_file_edits, plan_bindings
from gpudoc.errors import InputError, ProfileError, UsageError
from gpudoc.profiles.model import Profile
from tests.conftest import CONFIGS, SEEDS

KNOBS = {"micro_batch_size": 2, "gradient_accumulation_steps": 16, "gradient_checkpointing": True,
         "precision": "bf16", "lora_rank": 0, "n_negatives": 7, "temperature": 0.05}


def profile(**kw) -> Profile:
    return Profile(name="t", **{"train": KNOBS, **kw})


# -- env and placeholders --------------------------------------------------------------------------
def test_env_exports_every_knob_with_documented_spelling(tmp_path):
    plan = plan_bindings(profile(), ["python", "t.py"], cwd=tmp_path)
    assert plan.env == {
        "GPUDOC_MICRO_BATCH_SIZE": "2", "GPUDOC_GRADIENT_ACCUMULATION_STEPS": "16",
        "GPUDOC_GRADIENT_CHECKPOINTING": "true", "GPUDOC_PRECISION": "bf16", "GPUDOC_LORA_RANK": "0",
        "GPUDOC_N_NEGATIVES": "7", "GPUDOC_TEMPERATURE": "0.05",
    }
    assert plan.argv == ["python", "t.py"] and plan.file_edits == [] and plan.conflicts == []


def test_env_off_exports_nothing_and_every_declared_knob_needs_a_place(tmp_path):
    placed = ["python", "t.py", "--bs={micro_batch_size}", "--acc={gradient_accumulation_steps}",
              "--gc={gradient_checkpointing}", "--p={precision}"]
    assert plan_bindings(profile(bind={"env": False}), placed, cwd=tmp_path).env == {}
    with pytest.raises(ProfileError) as err:
        plan_bindings(profile(bind={"env": False}), ["python", "t.py", "--bs={micro_batch_size}"], cwd=tmp_path)
    message = str(err.value)
    assert "micro_batch_size" not in message.split(". Bind")[0]  # carried by its placeholder
    assert "precision = bf16 (no binding carries it and [bind] env = false exports no GPUDOC_* variable)" in message
    assert "[bind] env = true when the job reads GPUDOC_<KNOB> itself" in message


def test_placeholders_replaced_literal_braces_untouched(tmp_path):
    argv = ["python", "t.py", "--bs={micro_batch_size}", "--gc", "{gradient_checkpointing}",
            "--json", '{"a": {"b": 1}}', "--fmt", "{{epoch}}", "--world", "{world_size}"]
    plan = plan_bindings(profile(launch={"nproc_per_node": 2}), argv, cwd=tmp_path)
    assert plan.argv == ["python", "t.py", "--bs=2", "--gc", "true", "--json", '{"a": {"b": 1}}',
                         "--fmt", "{epoch}", "--world", "2"]


def test_unknown_placeholder_is_a_usage_error_naming_it(tmp_path):
    with pytest.raises(UsageError, match=r"unknown placeholder \{micro_bs\}"):
        plan_bindings(profile(), ["python", "t.py", "--bs", "{micro_bs}"], cwd=tmp_path)


# -- explicit key paths ----------------------------------------------------------------------------
def test_explicit_mapping_json_yaml_toml(tmp_path):
    (tmp_path / "c.json").write_text('{"train": {"bs": 8}}')
    (tmp_path / "c.yaml").write_text("train:\n  bs: 8   # per device\n")
    (tmp_path / "c.toml").write_text("[train]\nbs = 8 # per device\n")
    files = {name: {"micro_batch_size": "train.bs", "gradient_accumulation_steps": "train.accum"}
             for name in ("c.json", "c.yaml", "c.toml")}
    plan = plan_bindings(profile(bind={"files": files}), ["python", "t.py"], cwd=tmp_path)
    by_name = {Path(e.path).name: e for e in plan.file_edits}
    assert json.loads(by_name["c.json"].new_text) == {"train": {"accum": 16, "bs": 2}}
    assert by_name["c.yaml"].new_text == "train:\n  bs: 2   # per device\n  accum: 16\n"
    assert tomllib.loads(by_name["c.toml"].new_text) == {"train": {"bs": 2, "accum": 16}}
    assert "bs = 2 # per device" in by_name["c.toml"].new_text
    assert by_name["c.json"].changes == [{"key": "train.bs", "old": 8, "new": 2},
                                         {"key": "train.accum", "old": None, "new": 16}]


def test_explicit_mapping_in_a_shell_script(tmp_path):
    (tmp_path / "run.sh").write_text("python train.py \\\n  --bs 8 \\\n  --name 'my run'\n")
    plan = plan_bindings(profile(bind={"files": {"run.sh": {"micro_batch_size": "--bs", "n_negatives": "--neg"}}}),
                         ["bash", "run.sh"], cwd=tmp_path)
    (edit,) = plan.file_edits
    assert edit.new_text == "python train.py \\\n  --bs 2 \\\n  --neg 7 \\\n  --name 'my run'\n"


def test_missing_bound_file_is_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match="nope.json: file not found"):
        plan_bindings(profile(bind={"files": {"nope.json": "deepspeed"}}), ["python", "t.py"], cwd=tmp_path)


def test_unknown_file_preset_and_bad_mapping(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    with pytest.raises(ProfileError, match="unknown preset 'deepspeeed'"):
        plan_bindings(profile(bind={"files": {"a.json": "deepspeeed"}}), ["python"], cwd=tmp_path)
    with pytest.raises(ProfileError, match="expected a key path string"):
        plan_bindings(profile(bind={"files": {"a.json": {"micro_batch_size": 3}}}), ["python"], cwd=tmp_path)


def test_file_preset_that_cannot_carry_a_ladder_knob_is_an_error(tmp_path):
    shutil.copy(CONFIGS / "axolotl__deepspeed_configs__zero2.json", tmp_path / "ds.json")
    with pytest.raises(ProfileError, match="max_seq_len = 2048"):
        plan_bindings(profile(train={"micro_batch_size": 2, "max_seq_len": 2048},
                              bind={"files": {"ds.json": "deepspeed"}}), ["python", "t.py"], cwd=tmp_path)


# -- contradictions stop the plan; conflicts are said ---------------------------------------------
def test_torchrun_process_count_vs_launch_is_refused_before_anything(tmp_path):
    with pytest.raises(ProfileError) as info:
        plan_bindings(profile(launch={"nproc_per_node": 4, "nnodes": 1}),
                      ["torchrun", "--nproc-per-node=8", "--nnodes", "2", "t.py"], cwd=tmp_path)
    assert str(info.value) == ("the command starts 8 processes per node (torchrun) but the profile's [launch] "
                               "nproc_per_node = 4; the command runs on 2 node(s) (torchrun) but the profile's "
                               "[launch] nnodes = 1")
    with pytest.raises(ProfileError, match=r"starts 2 processes per node \(torchrun\) but the profile's \[gpu\] count = 1"):
        plan_bindings(profile(gpu={"count": 1}), ["torchrun", "--nproc_per_node=2", "t.py"], cwd=tmp_path)
    ok = plan_bindings(profile(launch={"nproc_per_node": 8}), ["torchrun", "--nproc_per_node=8", "t.py"], cwd=tmp_path)
    assert ok.conflicts == []


def test_deepspeed_train_batch_size_inconsistency_is_refused_and_nothing_planned(tmp_path):
    src = CONFIGS / "DeepSpeedExamples__Megatron-LM__scripts__ds_zero-offload_10B_config.json"
    shutil.copy(src, tmp_path / "ds.json")
    bad = profile(train={"micro_batch_size": 4, "gradient_accumulation_steps": 3},
                  launch={"nproc_per_node": 2}, bind={"files": {"ds.json": "deepspeed"}})
    with pytest.raises(ProfileError) as info:
        plan_bindings(bad, ["python", "t.py"], cwd=tmp_path)
    assert str(info.value) == ("ds.json: train_batch_size = 30 but micro batch x gradient accumulation x world "
                               "size = 4 x 3 x 2 = 24; set train_batch_size to 24 (or \"auto\") or change the profile")
    assert (tmp_path / "ds.json").read_bytes() == src.read_bytes()
    # 5 x 3 x 2 = 30 agrees with the file: planned, the two values written.
    good = plan_bindings(profile(train={"micro_batch_size": 5, "gradient_accumulation_steps": 3},
                                 launch={"nproc_per_node": 2}, bind={"files": {"ds.json": "deepspeed"}}),
                         ["python", "t.py"], cwd=tmp_path)
    (edit,) = good.file_edits
    assert edit.changes == [{"key": "train_micro_batch_size_per_gpu", "old": None, "new": 5}]


def test_deepspeed_batch_contradiction_in_a_json_the_command_names(tmp_path):
    src = CONFIGS / "DeepSpeedExamples__Megatron-LM__scripts__ds_zero-offload_10B_config.json"
    shutil.copy(src, tmp_path / "ds.json")
    # No binding at all: the file's 30 = micro 5 x its accumulation 3 x world 2; 4 processes do not agree.
    p = profile(train={"micro_batch_size": 5}, launch={"nproc_per_node": 4})
    with pytest.raises(ProfileError, match="train_batch_size = 30 but .* = 5 x 3 x 4 = 60"):
        plan_bindings(p, ["torchrun", "--nproc_per_node=4", "t.py", "--deepspeed", "ds.json"], cwd=tmp_path)
    p2 = profile(train={"micro_batch_size": 5}, launch={"nproc_per_node": 2})
    assert plan_bindings(p2, ["torchrun", "--nproc_per_node=2", "t.py", "--deepspeed", "ds.json"],
                         cwd=tmp_path).file_edits == []


def test_hard_coded_value_in_an_unbound_part_of_a_bound_file(tmp_path):
    shutil.copy(CONFIGS / "axolotl__examples__llama-2__qlora.yml", tmp_path / "q.yml")
    plan = plan_bindings(profile(train={"micro_batch_size": 4, "max_seq_len": 1024},
                                 bind={"files": {"q.yml": {"micro_batch_size": "micro_batch_size"}}}),
                         ["python", "t.py"], cwd=tmp_path)
    assert plan.conflicts == ["q.yml hard-codes max_seq_len = 4096 but the profile says 1024 and does not bind "
                              "it into that file"]


def test_a_key_value_override_beats_the_file_it_overrides_but_not_a_deepspeed_json(tmp_path):
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", tmp_path / "tt.yaml")
    shutil.copy(CONFIGS / "DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json",
                tmp_path / "ds.json")
    # tt.yaml hard-codes batch_size 2 and gradient checkpointing on; ds.json a micro batch of 8.
    train = {"micro_batch_size": 4, "gradient_accumulation_steps": 16, "gradient_checkpointing": False}
    bind = {"overrides": {"micro_batch_size": "batch_size"}, "via_env": ["gradient_checkpointing"],
            "files": {"tt.yaml": {"gradient_accumulation_steps": "gradient_accumulation_steps"},
                      "ds.json": {"gradient_accumulation_steps": "gradient_accumulation_steps"}}}
    plan = plan_bindings(profile(train=train, bind={"env": True, **bind}), ["tune", "run", "r.py", "--config",
                                                                            "tt.yaml"], cwd=tmp_path)
    assert plan.argv[-1] == "batch_size=4"
    assert sorted(plan.conflicts) == [
        "ds.json hard-codes micro_batch_size = 8 but the profile says 4 and does not bind it into that file",
        "tt.yaml hard-codes gradient_checkpointing = true but the profile says false and does not bind it into "
        "that file"]


def test_with_no_profile_a_note_names_gpudoc_not_a_profile(tmp_path):
    from gpudoc.job.knobs import JobReading

    shutil.copy(CONFIGS / "axolotl__examples__llama-2__qlora.yml", tmp_path / "q.yml")
    job = Profile(name="(command)", train={"micro_batch_size": 4, "max_seq_len": 1024}, job=JobReading(),
                  bind={"files": {"q.yml": {"micro_batch_size": "micro_batch_size"}}, "via_env": ["max_seq_len"],
                        "env": True})
    plan = plan_bindings(job, ["python", "t.py"], cwd=tmp_path)
    assert plan.conflicts == ["q.yml hard-codes max_seq_len = 4096 but gpudoc now sets 1024 and does not bind "
                              "it into that file"]


def test_hard_coded_flag_and_deepspeed_file_when_nothing_binds_them(tmp_path):
    shutil.copy(CONFIGS / "DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json",
                tmp_path / "ds.json")
    plan = plan_bindings(profile(train={"micro_batch_size": 2, "zero_stage": 2}),
                         ["python", "t.py", "--per_device_train_batch_size", "8", "--deepspeed", "ds.json"],
                         cwd=tmp_path)
    assert any("--per_device_train_batch_size 8" in c for c in plan.conflicts)
    assert any("ds.json hard-codes zero_stage = 3" in c for c in plan.conflicts)
    assert any("ds.json hard-codes micro_batch_size = 8" in c for c in plan.conflicts)
    assert plan.file_edits == []


def _two_deepspeed_jsons(tmp_path):
    """Two ZeRO-2 JSONs whose micro batch the Trainer fills ("auto"); a rung's [train] names the second."""
    for name in ("ds.json", "ds3.json"):
        (tmp_path / name).write_text('{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}')
    return {"zero_stage": 3, "micro_batch_size": 2, "ds_json": "ds3.json"}, ["python", "t.py", "--deepspeed", "ds.json"]


def test_a_deepspeed_json_a_bind_flag_names_instead_is_the_one_the_hf_preset_edits(tmp_path):
    train, command = _two_deepspeed_jsons(tmp_path)
    plan = plan_bindings(profile(train=train, bind={"args": "hf-trainer", "flags": {"ds_json": "--deepspeed"}}),
                         command, cwd=tmp_path)
    # The job runs with ds3.json: the stage goes there, and ds.json, which it no longer reads, is left alone.
    assert plan.argv == ["python", "t.py", "--deepspeed", "ds3.json", "--per_device_train_batch_size", "2"]
    [edit] = plan.file_edits
    assert edit.path.name == "ds3.json" and json.loads(edit.new_text)["zero_optimization"]["stage"] == 3


def test_a_deepspeed_json_a_bind_flag_names_keeps_the_auto_the_trainer_fills_as_if_the_command_named_it(tmp_path):
    train, command = _two_deepspeed_jsons(tmp_path)
    bind = {"files": {"ds3.json": "deepspeed"}}
    named = plan_bindings(profile(train=train, bind=bind), ["python", "t.py", "--deepspeed", "ds3.json"], cwd=tmp_path)
    moved = plan_bindings(profile(train=train, bind={**bind, "flags": {"ds_json": "--deepspeed"}}), command,
                          cwd=tmp_path)
    assert moved.argv == ["python", "t.py", "--deepspeed", "ds3.json"]
    # ds3.json is bound as the Trainer's JSON whichever way the command came to name it.
    assert [e.new_text for e in moved.file_edits] == [e.new_text for e in named.file_edits]


# -- dry run and apply -----------------------------------------------------------------------------
def _ds_plan(tmp_path):
    shutil.copy(CONFIGS / "axolotl__deepspeed_configs__zero2.json", tmp_path / "ds.json")
    (tmp_path / "cfg.yaml").write_text("bs: 8\n")
    return plan_bindings(profile(train={"micro_batch_size": 2, "zero_stage": 3},
                                 bind={"files": {"ds.json": "deepspeed", "cfg.yaml": {"micro_batch_size": "bs"}}}),
                         ["python", "t.py"], cwd=tmp_path)


def test_dry_run_diff_text(tmp_path):
    plan = _ds_plan(tmp_path)
    assert plan.diff_text() == (
        '--- a/ds.json\n+++ b/ds.json\n@@ -1,6 +1,6 @@\n {\n   "zero_optimization": {\n-    "stage": 2,\n'
        '+    "stage": 3,\n     "offload_optimizer": {\n       "device": "cpu"\n     },\n@@ -22,6 +22,6 @@\n'
        '   "gradient_accumulation_steps": "auto",\n   "gradient_clipping": "auto",\n   "train_batch_size": "auto",\n'
        '-  "train_micro_batch_size_per_gpu": "auto",\n+  "train_micro_batch_size_per_gpu": 2,\n'
        '   "wall_clock_breakdown": false\n }\n'
        '--- a/cfg.yaml\n+++ b/cfg.yaml\n@@ -1 +1 @@\n-bs: 8\n+bs: 2\n')
    # Planning is pure: the dry run changed nothing on disk.
    assert (tmp_path / "cfg.yaml").read_text() == "bs: 8\n"
    assert [e.to_dict()["path"] for e in plan.file_edits] == [str(tmp_path / "ds.json"), str(tmp_path / "cfg.yaml")]


def test_apply_writes_backups_and_records(tmp_path):
    plan = _ds_plan(tmp_path)
    records = apply_file_edits(plan)
    assert [Path(r["path"]).name for r in records] == ["ds.json", "cfg.yaml"]
    assert (tmp_path / "cfg.yaml").read_text() == "bs: 2\n"
    assert Path(records[1]["backup"]).read_text() == "bs: 8\n"
    assert records[1]["changes"] == [{"key": "bs", "old": 8, "new": 2}]
    assert (tmp_path / "ds.json.gpudoc.bak").read_bytes() == (CONFIGS / "axolotl__deepspeed_configs__zero2.json").read_bytes()


def test_failing_second_write_rolls_back_the_first(tmp_path):
    plan = _ds_plan(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    calls = []

    def flaky_writer(path, text):
        calls.append(path.name)
        if path.name == "cfg.yaml":
            raise OSError(28, "No space left on device", str(path))
        from gpudoc.atomic import atomic_write_text
        atomic_write_text(path, text)

    with pytest.raises(InputError, match="No space left on device.*no config file was changed"):
        apply_file_edits(plan, writer=flaky_writer)
    assert calls == ["ds.json", "cfg.yaml"]
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data


def test_write_failing_mid_file_leaves_the_original_intact(tmp_path):
    """The real writer, made to fail after part of the data is on disk (file-size limit: works
    for root too, unlike permissions)."""
    shutil.copy(CONFIGS / "axolotl__deepspeed_configs__zero2.json", tmp_path / "ds.json")
    plan = plan_bindings(profile(train={"zero_stage": 3, "offload_params": True},
                                 bind={"files": {"ds.json": "deepspeed"}}), ["python", "t.py"], cwd=tmp_path)
    original = (tmp_path / "ds.json").read_bytes()
    limit = len(original) + 4  # room for the backup, not for the (longer) new text
    assert len(plan.file_edits[0].new_text.encode()) > limit
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(InputError, match="no config file was changed"):
            apply_file_edits(plan)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert (tmp_path / "ds.json").read_bytes() == original
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_file_changed_since_planning_is_refused(tmp_path):
    plan = _ds_plan(tmp_path)
    (tmp_path / "cfg.yaml").write_text("bs: 16\n")
    with pytest.raises(InputError, match="changed since gpudoc planned"):
        apply_file_edits(plan)
    assert (tmp_path / "cfg.yaml").read_text() == "bs: 16\n"
    assert not (tmp_path / "ds.json.gpudoc.bak").exists()


# -- knobs the job reads from the environment beside a preset ---------------------------------------
def test_a_knob_no_preset_can_pass_is_refused_with_the_way_out(tmp_path):
    p = profile(train={"micro_batch_size": 2, "zero_stage": 2}, bind={"args": "hf-trainer"})
    with pytest.raises(ProfileError) as info:
        plan_bindings(p, ["python", "train.py"], cwd=tmp_path)
    assert "zero_stage = 2" in str(info.value) and "via_env" in str(info.value)


def test_via_env_knobs_reach_the_job_through_gpudoc_variables(tmp_path):
    p = profile(train={"micro_batch_size": 2, "zero_stage": 2}, bind={"args": "hf-trainer", "via_env": ["zero_stage"]})
    plan = plan_bindings(p, ["python", "train.py"], cwd=tmp_path)
    assert plan.env["GPUDOC_ZERO_STAGE"] == "2"
    assert plan.argv == ["python", "train.py", "--per_device_train_batch_size", "2"]


def test_via_env_names_only_declared_knobs(tmp_path):
    p = profile(train={"micro_batch_size": 2, "zero_stage": 2}, bind={"args": "hf-trainer", "via_env": ["zero_stag"]})
    with pytest.raises(ProfileError, match="bind.via_env: 'zero_stag' is not a knob in \\[train\\] "
                                           "\\(did you mean 'zero_stage'\\?\\)"):
        plan_bindings(p, ["python", "train.py"], cwd=tmp_path)


# -- explicit bindings: typed, several keys, value maps, Python dict keys ----------------------------
def _seed_004_config(tmp_path: Path) -> Path:
    """Seed 004's config_16gb_safe.json, as the guide prints it."""
    lines = (SEEDS / "004_ad73fba5b2b6b0c2.txt").read_text(encoding="utf-8").splitlines()
    start = lines.index("Create `config_16gb_safe.json`:") + 2
    end = lines.index("}", start) + 1
    path = tmp_path / "config.json"
    path.write_text("\n".join(lines[start:end]) + "\n")
    return path


SEED_004 = {"micro_batch_size": "vram.batch_size", "gradient_accumulation_steps": "vram.gradient_accumulation_steps",
            "max_seq_len": ["model.max_seq_len", "vram.max_seq_len"]}


def test_a_string_over_a_boolean_is_refused_naming_file_key_old_value_and_knob(tmp_path):
    cfg = _seed_004_config(tmp_path)
    before = cfg.read_bytes()
    p = profile(train={"micro_batch_size": 2, "gradient_accumulation_steps": 8, "max_seq_len": 512,
                       "precision": "fp16"},
                bind={"files": {"config.json": {**SEED_004, "precision": "vram.use_fp16"}}})
    with pytest.raises(ProfileError) as info:
        plan_bindings(p, ["python", "train.py", "--config", "config.json"], cwd=tmp_path)
    assert str(info.value) == ('config.json: vram.use_fp16 holds the boolean true; precision = "fp16" is a string, '
                               'not a boolean; say how with a value map: precision = {key = "vram.use_fp16", '
                               'map = {fp16 = true, ...}}')
    assert cfg.read_bytes() == before


def test_a_value_map_and_a_list_of_keys_write_the_seed_004_config(tmp_path):
    cfg = _seed_004_config(tmp_path)
    before = cfg.read_text()
    spec = {**SEED_004, "precision": {"key": "vram.use_fp16", "map": {"fp16": True, "bf16": False, "fp32": False}}}
    p = profile(train={"micro_batch_size": 2, "gradient_accumulation_steps": 8, "max_seq_len": 512,
                       "precision": "bf16"}, bind={"files": {"config.json": spec}})
    plan = plan_bindings(p, ["python", "train.py", "--config", "config.json"], cwd=tmp_path)
    apply_file_edits(plan)
    assert cfg.read_text() == (before.replace('"max_seq_len": 256', '"max_seq_len": 512')
                               .replace('"batch_size": 1', '"batch_size": 2')
                               .replace('"gradient_accumulation_steps": 16', '"gradient_accumulation_steps": 8')
                               .replace('"use_fp16": true', '"use_fp16": false'))
    assert plan.said() == ["config.json: vram.batch_size 1 -> 2, vram.gradient_accumulation_steps 16 -> 8, "
                           "model.max_seq_len 256 -> 512, vram.max_seq_len 256 -> 512, vram.use_fp16 true -> false"]
    shown = {(b["knob"], b["key"]): (b["old"], b["new"]) for b in plan.bindings}
    assert shown[("max_seq_len", "model.max_seq_len")] == (256, 512)
    assert shown[("precision", "vram.use_fp16")] == (True, False)


def test_a_misspelt_key_beside_the_real_one_is_refused_not_added(tmp_path):
    cfg = _seed_004_config(tmp_path)
    p = profile(train={"micro_batch_size": 2}, bind={"files": {"config.json": {"micro_batch_size": "vram.bach_size"}}})
    with pytest.raises(ProfileError, match=r"config.json: vram.bach_size is not in the file \(did you mean "
                                           r"'vram.batch_size'\?\); gpudoc would add it as a new key"):
        plan_bindings(p, ["python", "train.py"], cwd=tmp_path)
    assert "bach" not in cfg.read_text()


def test_python_config_dict_keys_by_subscript_and_by_dot(tmp_path):
    text = ('MAX_SEQ_LENGTH = 1536  # Down from 2048\n\nTRAINING_CONFIG = {\n'
            '    "per_device_train_batch_size": 1,     # Down from 2\n'
            '    "gradient_accumulation_steps": 16,    # Up from 8\n}\n')
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.py").write_text(text)
    spec = {"micro_batch_size": 'TRAINING_CONFIG["per_device_train_batch_size"]',
            "gradient_accumulation_steps": "TRAINING_CONFIG.gradient_accumulation_steps",
            "max_seq_len": "MAX_SEQ_LENGTH"}
    p = profile(train={"micro_batch_size": 2, "gradient_accumulation_steps": 8, "max_seq_len": 1024},
                bind={"files": {"config/config.py": spec}})
    plan = plan_bindings(p, ["python", "train_baseline.py"], cwd=tmp_path)
    apply_file_edits(plan)
    assert (tmp_path / "config" / "config.py").read_text() == (
        'MAX_SEQ_LENGTH = 1024  # Down from 2048\n\nTRAINING_CONFIG = {\n'
        '    "per_device_train_batch_size": 2,     # Down from 2\n'
        '    "gradient_accumulation_steps": 8,    # Up from 8\n}\n')
    assert plan.said() == ['config/config.py: TRAINING_CONFIG["per_device_train_batch_size"] 1 -> 2, '
                           "TRAINING_CONFIG.gradient_accumulation_steps 16 -> 8, MAX_SEQ_LENGTH 1536 -> 1024"]
    # The ladder's "selective" checkpointing is a string: it never lands on a number.
    p2 = profile(train={"gradient_checkpointing": "selective"},
                 bind={"files": {"config/config.py": {"gradient_checkpointing": "MAX_SEQ_LENGTH"}}})
    with pytest.raises(ProfileError, match='MAX_SEQ_LENGTH holds the integer 1024; gradient_checkpointing = '
                                           '"selective" is a string, not an integer'):
        plan_bindings(p2, ["python", "train_baseline.py"], cwd=tmp_path)


def test_real_yaml_keys_are_type_checked_and_auto_is_free(tmp_path):
    shutil.copy(CONFIGS / "axolotl__examples__llama-2__qlora.yml", tmp_path / "q.yml")
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_2__3B_full_single_device.yaml", tmp_path / "tt.yaml")
    before = (tmp_path / "q.yml").read_text()
    ok = profile(train={"micro_batch_size": 1, "gradient_checkpointing": True},
                 bind={"files": {"q.yml": {"micro_batch_size": "micro_batch_size", "gradient_checkpointing": "bf16"}}})
    plan = plan_bindings(ok, ["accelerate", "launch", "-m", "axolotl.cli.train", "q.yml"], cwd=tmp_path)
    (edit,) = plan.file_edits
    assert edit.new_text == before.replace("micro_batch_size: 2", "micro_batch_size: 1").replace("bf16: auto", "bf16: true")
    bad = profile(train={"micro_batch_size": 1}, bind={"files": {"tt.yaml": {"micro_batch_size": "dtype"}}})
    with pytest.raises(ProfileError, match='tt.yaml: dtype holds the string "bf16"; micro_batch_size = 1 is an '
                                           'integer, not a string'):
        plan_bindings(bad, ["tune", "run", "full_finetune_single_device", "--config", "tt.yaml"], cwd=tmp_path)


def test_accumulation_into_a_torchtune_config_that_steps_the_optimizer_in_backward_is_refused(tmp_path):
    # torchtune's 3B single-device config: optimizer_in_bwd: True "Requires gradient_accumulation_steps=1".
    shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_2__3B_full_single_device.yaml", tmp_path / "tt.yaml")
    command = ["tune", "run", "full_finetune_single_device", "--config", "tt.yaml"]
    asks = profile(train={"micro_batch_size": 2, "gradient_accumulation_steps": 8},
                   bind={"files": {"tt.yaml": "torchtune"}})
    with pytest.raises(ProfileError, match=r"optimizer_in_bwd: True allows no gradient accumulation, and the "
                                           r"profile asks for 8"):
        plan_bindings(asks, command, cwd=tmp_path)
    one = profile(train={"micro_batch_size": 2, "gradient_accumulation_steps": 1}, bind={"files": {"tt.yaml": "torchtune"}})
    (edit,) = plan_bindings(one, command, cwd=tmp_path).file_edits
    assert "batch_size: 2" in edit.new_text and "optimizer_in_bwd: True" in edit.new_text


def test_said_names_each_changed_flag_of_the_command_and_of_a_script(tmp_path):
    shutil.copy(CONFIGS / "FastChat__scripts__train_vicuna_7b.sh", tmp_path / "train.sh")
    before = (tmp_path / "train.sh").read_text()
    p = profile(train={"micro_batch_size": 1, "gradient_accumulation_steps": 32}, launch={"nproc_per_node": 16},
                bind={"files": {"train.sh": "hf-trainer"}})
    plan = plan_bindings(p, ["bash", "train.sh"], cwd=tmp_path)
    (edit,) = plan.file_edits
    assert edit.new_text == before.replace("--per_device_train_batch_size 2 ", "--per_device_train_batch_size 1 ") \
        .replace("--gradient_accumulation_steps 16 ", "--gradient_accumulation_steps 32 ")
    assert plan.said() == ["train.sh: --per_device_train_batch_size 2 -> 1, --gradient_accumulation_steps 16 -> 32"]
    typed = plan_bindings(profile(train={"micro_batch_size": 8, "precision": "bf16"}, bind={"args": "hf-trainer"}),
                          ["python", "train.py", "--per_device_train_batch_size=2", "--fp16", "--seed", "1"],
                          cwd=tmp_path)
    assert typed.argv == ["python", "train.py", "--per_device_train_batch_size=8", "--seed", "1", "--bf16"]
    assert typed.said() == ["command: --per_device_train_batch_size 2 -> 8", "command: --fp16 removed",
                            "command: --bf16 added"]
    # At a relaunch each flag is said from what the attempt before it ran, as a file edited in place is.
    assert typed.said(before=["python", "train.py", "--per_device_train_batch_size", "4", "--seed", "1",
                              "--bf16"]) == ["command: --per_device_train_batch_size 4 -> 8"]
    assert typed.said(before=["python", "train.py", "--per_device_train_batch_size=8", "--fp16", "--seed", "1"]) \
        == ["command: --fp16 removed", "command: --bf16 added"]


def test_a_misspelt_name_in_a_nanogpt_config_is_refused_a_new_one_appended(tmp_path):
    shutil.copy(CONFIGS / "nanoGPT__config__train_gpt2.py", tmp_path / "cfg.py")
    before = (tmp_path / "cfg.py").read_text()
    typo = profile(train={"micro_batch_size": 6}, bind={"files": {"cfg.py": {"micro_batch_size": "batch_sise"}}})
    with pytest.raises(ProfileError, match=r"cfg.py: batch_sise is not in the file \(did you mean 'batch_size'\?\)"):
        plan_bindings(typo, ["python", "train.py", "cfg.py"], cwd=tmp_path)
    new = profile(train={"n_negatives": 7}, bind={"files": {"cfg.py": {"n_negatives": "n_negatives"}}})
    (edit,) = plan_bindings(new, ["python", "train.py", "cfg.py"], cwd=tmp_path).file_edits
    assert edit.new_text == before + "n_negatives = 7\n"
