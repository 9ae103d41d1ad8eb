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
    assert any(n.startswith('ds.json: left train_micro_batch_size_per_gpu = "auto"') and
               n.endswith("which carries micro_batch_size = 4") for n in plan.notes)
    said = plan.said()
    assert said[:3] == ["command: --per_device_train_batch_size 16 -> 4", "command: --gradient_accumulation_steps 8 added",
                        "command: --bf16 added"]
    assert len(said) == 3 + len(plan.file_edits) and all(line.startswith("ds.json: ") for line in said[3:])


@pytest.mark.parametrize(("flags", "bind", "carried"), [
    (["--per_device_train_batch_size", "16"], {}, set()),  # the command's value reaches the job
    ([], {}, set()),  # the Trainer's own default does
    (["--per_device_train_batch_size", "4", "--bf16"], {}, {"micro_batch_size", "precision"}),  # already so
    (["--per_device_train_batch_size", "4", "--bf16", "False"], {}, {"micro_batch_size"}),  # a switch said off
    ([], {"via_env": ["micro_batch_size", "gradient_accumulation_steps"]},  # the job reads GPUDOC_<KNOB>
     {"micro_batch_size", "gradient_accumulation_steps"}),
], ids=["another-value", "no-flag", "the-profiles-value", "bf16-said-off", "via-env"])
def test_an_auto_no_flag_carries_is_said_to_miss_the_profiles_value(tmp_path, flags, bind, carried):
    """A JSON the Trainer reads (--deepspeed) bound in [bind.files] without [bind] args: its "auto" stays,
    and where no flag carries the profile's value into it, the plan says the value will not arrive."""
    shutil.copy(CONFIGS / AUTO_JSONS[0], tmp_path / "ds.json")
    command = ["torchrun", "--nproc_per_node=2", "train.py", "--deepspeed", "ds.json", *flags]
    plan = plan_bindings(Profile(name="t", train=KNOBS, launch={"nproc_per_node": 2},
                                 bind={"files": {"ds.json": "deepspeed"}, **bind}), command, cwd=tmp_path)
    left = {knob for knob in KNOBS for n in plan.notes + plan.conflicts if n.startswith("ds.json: left")
            and f"which carries {knob} = " in n}
    missed = {knob for knob in KNOBS for n in plan.conflicts if n.startswith("ds.json: left")
              and f"which no binding sets to {knob} = " in n and 'set [bind] args = "hf-trainer"' in n}
    assert left == carried and missed == set(KNOBS) - carried
    assert json.loads((tmp_path / "ds.json").read_text())["train_micro_batch_size_per_gpu"] == "auto"


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


def test_a_zero2_json_with_no_offload_keys_gets_the_optimizer_offload_rung_through_the_command(tmp_path):
    # DeepSpeedExamples training/autotuning/hf/bert-base/test_tune.sh, TEST=z2: its ds_config_z2.json is six
    # lines (micro batch "auto", stage 2), no offload key at all; the Trainer's script is a stand-in.
    from gpudoc.ladder import suggest
    from gpudoc.profiles import load_profile
    from gpudoc.profiles.from_job import with_command
    from gpudoc.units import GIB
    from tests.job.scripts import write_hf_script
    from tests.ladder.helpers import no_estimate, oom

    (tmp_path / "dsconfigs").mkdir()
    shutil.copy(CONFIGS.parent / "heldout" / "DeepSpeedExamples__training__autotuning__hf__dsconfigs__ds_config_z2.json",
                tmp_path / "dsconfigs" / "ds_config_z2.json")
    cwd = tmp_path / "bert-base"
    write_hf_script(cwd, "run_glue.py")
    command = ["deepspeed", "--num_nodes=1", "--num_gpus=2", "run_glue.py", "--deepspeed", "../dsconfigs/ds_config_z2.json",
               "--model_name_or_path", "bert-base-cased", "--per_device_train_batch_size", "64", "--output_dir", "out"]
    profile = with_command(load_profile("gpu-24gb", cwd), command, cwd, {})
    assert (profile.train["zero_stage"], profile.train["offload_optimizer"]) == (2, False)
    failed = oom(requested=2 * GIB, total=24 * GIB, allocated=22 * GIB)
    [offload] = [s for s in suggest(failed, profile, estimate=no_estimate).suggestions if s.rung == "offload-optimizer"]
    # The rung is written into the JSON the command names, where DeepSpeed reads it; "auto" stays for the Trainer.
    plan = plan_bindings(profile.with_train(offload.changes).for_planning(), command, cwd=cwd)
    apply_file_edits(plan)
    after = json.loads((tmp_path / "dsconfigs" / "ds_config_z2.json").read_text())
    assert after["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    assert after["train_micro_batch_size_per_gpu"] == "auto"


PIPE = CONFIGS / "DeepSpeedExamples__training__pipeline_parallelism__ds_config.json"  # 256, micro 8, no accumulation
# Its train.py's parser (training/pipeline_parallelism/train.py): -p is PipelineModule(num_stages=...).
PIPE_SCRIPT = """import argparse
import deepspeed
parser = argparse.ArgumentParser(description='CIFAR')
parser.add_argument('-s', '--steps', type=int, default=100, help='quit after this many steps')
parser.add_argument('-p', '--pipeline-parallel-size', type=int, default=2, help='pipeline parallelism')
parser = deepspeed.add_config_arguments(parser)
"""


def _pipeline_example(tmp_path):
    shutil.copy(PIPE, tmp_path / "ds_config.json")
    (tmp_path / "train.py").write_text(PIPE_SCRIPT)
    # Its run.sh's line, with the GPUs counted: 4 ranks in 2 pipeline stages are 2 data-parallel ranks.
    return ["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed_config=ds_config.json", "-p", "2", "--steps=200"]


def test_accumulation_is_derived_from_train_batch_size_over_the_data_parallel_ranks(tmp_path):
    from tests.conftest import gpudoc_cli

    command = _pipeline_example(tmp_path)
    done = gpudoc_cli("run", "--dry-run", "--json", "--", *command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    read = {b["knob"]: (b["old"], b["where"]) for b in json.loads(done.stdout)["bindings"]}
    # DeepSpeed's _set_batch_related_parameters: 256 // 8 // (4 ranks / 2 stages) = 16; no
    # zero_optimization section: DeepSpeed's stage 0.
    assert read == {"micro_batch_size": (8, "file:ds_config.json"),
                    "gradient_accumulation_steps": (16, "file:ds_config.json"), "zero_stage": (0, "file:ds_config.json")}
    # The stages from the script's own parser default when -p is left out: still 2.
    from gpudoc.job.knobs import read_job

    without = read_job([c for c in command if c not in ("-p", "2")], tmp_path)
    assert without.values["gradient_accumulation_steps"] == 16 and without.launch["pipeline_parallel"] == 2
    # No GPU count: the data-parallel ranks are the launcher's to count at start; nothing guessed.
    unknown = read_job(["deepspeed", "train.py", "--deepspeed_config=ds_config.json"], tmp_path)
    assert "gradient_accumulation_steps" not in unknown.values
    assert any("derives its accumulation from train_batch_size" in note for note in unknown.notes)


def test_a_pipeline_parallel_profile_is_planned_against_its_data_parallel_ranks(tmp_path):
    command = _pipeline_example(tmp_path)
    # 4 x 32 x 2 data-parallel ranks = 256: what DeepSpeed asserts, so the edit is planned.
    train = {"micro_batch_size": 4, "gradient_accumulation_steps": 32}
    bind = {"files": {"ds_config.json": "deepspeed"}}
    plan = plan_bindings(Profile(name="t", train=train, launch={"nproc_per_node": 4, "pipeline_parallel": 2},
                                 bind=bind), command, cwd=tmp_path)
    (edit,) = plan.file_edits
    assert {c["key"]: c["new"] for c in edit.changes} == {"train_micro_batch_size_per_gpu": 4,
                                                          "gradient_accumulation_steps": 32}
    piped = Profile(name="t", train=train, launch={"nproc_per_node": 4, "pipeline_parallel": 2})
    assert (piped.data_parallel_size, piped.global_batch_size) == (2, 256)
    # Without the stages the same profile is 4 x 32 x 4 = 512: refused, as DeepSpeed would stop it.
    from gpudoc.errors import ProfileError

    with pytest.raises(ProfileError, match=r"train_batch_size = 256 but .* = 4 x 32 x 4 = 512"):
        plan_bindings(Profile(name="t", train=train, launch={"nproc_per_node": 4}, bind=bind), command,
                      cwd=tmp_path)
    # Nothing says the accumulation: DeepSpeed derives it (256 // 4 // 2 = 32), which is no contradiction.
    assert plan_bindings(Profile(name="t", train={"micro_batch_size": 4}, bind=bind,
                                 launch={"nproc_per_node": 4, "pipeline_parallel": 2}), command,
                         cwd=tmp_path).file_edits
    # The user's path: the stages read from the command, a halved micro batch planned (DeepSpeed derives 32).
    from gpudoc.profiles.from_job import job_profile

    read = job_profile(command, tmp_path)
    assert read.launch["pipeline_parallel"] == 2 and read.global_batch_size == 256
    (edit,) = plan_bindings(read.with_train({"micro_batch_size": 4}).for_planning(), command, cwd=tmp_path).file_edits
    assert edit.changes == [{"key": "train_micro_batch_size_per_gpu", "old": 8, "new": 4}]


@pytest.mark.parametrize(("data", "ranks", "derived"), [
    ({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 8}, 2, {"gradient_accumulation_steps": 16}),
    ({"train_batch_size": 256, "gradient_accumulation_steps": 4}, 2, {"micro_batch_size": 32}),
    ({"train_batch_size": 64}, 8, {"micro_batch_size": 8, "gradient_accumulation_steps": 1}),
    ({"train_micro_batch_size_per_gpu": 8}, None, {"gradient_accumulation_steps": 1}),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, 4, {}),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8}, None, {}),
    ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}, 2, {}),
])
def test_any_two_batch_keys_give_the_third_as_deepspeed_derives_it(data, ranks, derived):
    from gpudoc.frameworks.deepspeed import derived_batch

    assert derived_batch(data, ranks) == derived


def test_a_json_that_names_no_zero_stage_runs_deepspeeds_stage_0(tmp_path):
    # DeepSpeedExamples training/BingBertSquad/run_squad_deepspeed.sh with NGPU_PER_NODE=4: its JSON
    # (train_batch_size 24, micro 3, fp16, no zero_optimization) under the launcher's 4 GPUs.
    from gpudoc.job.knobs import read_job

    shutil.copy(CONFIGS.parent / "heldout" / "DeepSpeedExamples__training__BingBertSquad__deepspeed_bsz24_config.json",
                tmp_path / "deepspeed_bsz24_config.json")
    (tmp_path / "nvidia_run_squad_deepspeed.py").write_text("import deepspeed\n")
    reading = read_job(["deepspeed", "--num_nodes", "1", "--num_gpus", "4", "nvidia_run_squad_deepspeed.py",
                        "--do_train", "--fp16", "--deepspeed", "--deepspeed_config", "deepspeed_bsz24_config.json"],
                       tmp_path)
    assert {k: reading.values.get(k) for k in ("micro_batch_size", "gradient_accumulation_steps", "zero_stage",
                                               "precision")} == {"micro_batch_size": 3, "gradient_accumulation_steps": 2,
                                                                 "zero_stage": 0, "precision": "fp16"}


def test_deepspeeds_start_up_batch_check_is_its_adapters_and_derives_what_the_json_leaves_out():
    from gpudoc.frameworks import deepspeed

    check = deepspeed.file_preset.startup_check
    assert check is not None and deepspeed.file_preset.command_overrides is False  # it reads its JSON itself
    # train_batch_size 32 = 4 x 2 x 4: holds; accumulation unset is derived as DeepSpeed does (32 // 4 // 4).
    assert check({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
                 "ds.json", {}, 4) is None
    assert check({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}, "ds.json", {}, 4) is None
    # The knobs fill what the JSON says "auto" for (the Trainer passes them): 4 x 4 x 4 = 64, not 32.
    said = check({"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"},
                 "ds.json", {"micro_batch_size": 4, "gradient_accumulation_steps": 4}, 4)
    assert said == ("ds.json: train_batch_size = 32 but micro batch x gradient accumulation x world size = 4 x 4 x 4 = "
                    "64; set train_batch_size to 64 (or \"auto\") or change the profile")
