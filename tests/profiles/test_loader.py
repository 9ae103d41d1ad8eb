"""Profile lookup, `extends`, and validation errors that name file, line and key."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from gpudoc.errors import ProfileError
from gpudoc.estimate import estimate
from gpudoc.frameworks.registry import arg_preset_names
from gpudoc.profiles import load_profile, shipped_profiles_dir
from gpudoc.profiles.loader import list_profile_names, resolve_profile_path
from gpudoc.profiles.model import EMPTY
from gpudoc.trust import owner_name
from tests.conftest import gpudoc_cli


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


SHIPPED = sorted(shipped_profiles_dir().glob("*.toml"))


def test_shipped_profiles_exist_for_every_tier_and_seed():
    names = {p.stem for p in SHIPPED}
    for tier in ("gpu-8gb", "gpu-12gb", "gpu-16gb", "gpu-24gb", "gpu-40gb", "gpu-48gb", "gpu-80gb"):
        assert tier in names
    # One per workflow in the seed guides.
    for workflow in ("pretrain-512m-4x44gb", "llama3.2-1b-4xa10g", "contrastive-24gb",
                     "qwen2.5-7b-lora-24gb", "mamba-16gb"):
        assert workflow in names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_profile_loads_and_is_marked_shipped(path):
    profile = load_profile(path.stem)
    assert profile.shipped
    assert profile.description
    assert profile.gpu["memory_gib"] > 0


def test_tiers_grow_with_their_names():
    sizes = [load_profile(f"gpu-{n}gb").gpu["memory_gib"] for n in (8, 12, 16, 24, 40, 48, 80)]
    assert sizes == sorted(sizes)


def test_extends_merges_tables_child_wins():
    profile = load_profile("llama3.2-1b-4xa10g")
    assert [p.stem for p in profile.chain] == ["llama3.2-1b-4xa10g", "a10g-24gb", "gpu-24gb"]
    assert profile.gpu["memory_gib"] == 22.49  # from a10g-24gb, overriding gpu-24gb's 22.5
    assert profile.gpu["count"] == 4
    assert profile.env["TOKENIZERS_PARALLELISM"] == "false"  # inherited from the tier
    assert profile.env["OMP_NUM_THREADS"] == "12"
    assert profile.global_batch_size == 2 * 64 * 4


def test_user_rungs_are_concatenated_across_extends(isolated_home):
    write(isolated_home / "gpudoc.toml", """
        extends = "contrastive-24gb"
        [[ladder.rung]]
        name = "shorter-queue"
        knob = "queue"
        op = "decrement"
        [train]
        queue = 4
    """)
    profile = load_profile()
    assert [r.name for r in profile.user_rungs] == ["fewer-negatives", "fewer-positives", "shorter-queue"]
    assert profile.name == "gpudoc.toml"
    assert not profile.shipped


def test_lookup_order_project_then_user_then_shipped(isolated_home, monkeypatch):
    assert resolve_profile_path("gpu-24gb").parent == shipped_profiles_dir()
    user = write(Path(isolated_home.parent) / "xdg" / "gpudoc" / "profiles" / "gpu-24gb.toml",
                 'description = "user copy"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user.parent.parent.parent))
    assert resolve_profile_path("gpu-24gb") == user
    project = write(isolated_home / ".gpudoc" / "profiles" / "gpu-24gb.toml", 'description = "project copy"\n')
    assert resolve_profile_path("gpu-24gb") == project
    assert list_profile_names()["gpu-24gb"] == project


def test_no_name_means_gpudoc_toml_or_no_profile(isolated_home, monkeypatch):
    assert load_profile() is EMPTY
    write(isolated_home / "gpudoc.toml", 'description = "here"\n[train]\nmicro_batch_size = 3\n')
    assert load_profile().train["micro_batch_size"] == 3
    monkeypatch.setenv("GPUDOC_PROFILE", "gpu-8gb")
    assert load_profile().name == "gpu-8gb"


def test_a_profile_may_extend_the_shipped_profile_of_the_same_name(isolated_home):
    write(isolated_home / ".gpudoc" / "profiles" / "gpu-24gb.toml", """
        extends = "gpu-24gb"
        [gpu]
        min_free_gib = 21
    """)
    profile = load_profile("gpu-24gb")
    assert profile.gpu["min_free_gib"] == 21
    assert profile.gpu["memory_gib"] == 22.5
    assert not profile.shipped


def expect_error(path: Path, *fragments: str) -> str:
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    return message


def test_unknown_key_names_file_line_key_and_suggests(isolated_home):
    path = write(isolated_home / "p.toml", """
        description = "x"
        [launch]
        nproc_per_node = 2
        nprocs_per_node = 2
    """)
    expect_error(path, f"{path}:5", "launch.nprocs_per_node", "did you mean 'nproc_per_node'")


def test_unknown_table_suggests(isolated_home):
    path = write(isolated_home / "p.toml", '[trian]\nmicro_batch_size = 1\n')
    expect_error(path, f"{path}:1", "trian", "did you mean 'train'")


def test_wrong_types_are_named(isolated_home):
    path = write(isolated_home / "p.toml", '[gpu]\ncount = "four"\n')
    expect_error(path, f"{path}:2", "gpu.count", "expected an integer", "'four'")
    path = write(isolated_home / "q.toml", '[train]\nmicro_batch_size = true\n')
    expect_error(path, "train.micro_batch_size", "got a boolean")


def test_enum_values_are_checked_with_did_you_mean(isolated_home):
    path = write(isolated_home / "p.toml", '[train]\nprecision = "bf61"\n')
    expect_error(path, "train.precision", "'bf61' is not one of", "did you mean 'bf16'")


def test_custom_train_knobs_allowed_but_not_tables(isolated_home):
    ok = write(isolated_home / "ok.toml", '[train]\nn_negatives = 24\nloss = "infonce"\n')
    assert load_profile(str(ok)).train["n_negatives"] == 24
    bad = write(isolated_home / "bad.toml", '[train]\nschedule = [1, 2]\n')
    expect_error(bad, "train.schedule", "custom knobs must be numbers, booleans or strings")


def test_gradient_checkpointing_accepts_selective_only(isolated_home):
    ok = write(isolated_home / "ok.toml", '[train]\ngradient_checkpointing = "selective"\n')
    assert load_profile(str(ok)).train["gradient_checkpointing"] == "selective"
    bad = write(isolated_home / "bad.toml", '[train]\ngradient_checkpointing = "full"\n')
    expect_error(bad, "train.gradient_checkpointing")


def test_zero_stage_and_target_utilization_ranges(isolated_home):
    expect_error(write(isolated_home / "a.toml", "[train]\nzero_stage = 4\n"), "train.zero_stage", "0..3")
    expect_error(write(isolated_home / "b.toml", "[ladder]\ntarget_utilization = 1.5\n"), "ladder.target_utilization")


def test_user_rung_validation(isolated_home):
    path = write(isolated_home / "p.toml", """
        [[ladder.rung]]
        name = "x"
        knob = "k"
        op = "shrink"
    """)
    expect_error(path, "ladder.rung.op", "'shrink' is not one of halve, decrement, set")
    path = write(isolated_home / "q.toml", """
        [[ladder.rung]]
        name = "x"
        knob = "k"
        op = "set"
    """)
    expect_error(path, "op = \"set\" needs a value")


def test_toml_syntax_error_names_the_file(isolated_home):
    path = write(isolated_home / "p.toml", "[train\nmicro_batch_size = 1\n")
    expect_error(path, str(path), "not valid TOML", "line 1")


def test_arrays_nested_thousands_deep_are_refused_not_a_crash(isolated_home):
    path = isolated_home / "deep.toml"
    path.write_text("a = " + "[" * 5000 + "1" + "]" * 5000 + "\n")
    expect_error(path, str(path), "nest too deeply")


def test_unknown_profile_suggests_a_close_name():
    with pytest.raises(ProfileError, match="did you mean 'gpu-24gb'"):
        load_profile("gpu-24bg")


def test_missing_profile_file():
    with pytest.raises(ProfileError, match="profile file not found: missing.toml"):
        load_profile("missing.toml")


def test_extends_cycle_is_reported(isolated_home):
    write(isolated_home / "a.toml", 'extends = "./b.toml"\n')
    write(isolated_home / "b.toml", 'extends = "./a.toml"\n')
    with pytest.raises(ProfileError, match="cycle"):
        load_profile("a.toml")


def test_extends_unknown_parent(isolated_home):
    path = write(isolated_home / "p.toml", 'extends = "gpu-42gb"\n')
    expect_error(path, "extends = 'gpu-42gb'", "unknown profile")


def test_bind_via_env_needs_the_environment_binding(isolated_home):
    path = write(isolated_home / "p.toml", '[train]\nzero_stage = 2\n[bind]\nenv = false\nvia_env = ["zero_stage"]\n')
    expect_error(path, "bind.via_env", "needs env = true")
    path = write(isolated_home / "q.toml", '[bind]\nvia_env = [2]\n')
    expect_error(path, "bind.via_env", "array of knob names")


def test_a_binary_profile_is_one_line_naming_it_also_as_a_parent(isolated_home):
    binary = isolated_home / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00[gpu]\n")
    expect_error(binary, str(binary), "not a text file in UTF-8")
    child = write(isolated_home / "child.toml", 'extends = "./binary.toml"\n')
    expect_error(child, str(binary), "not a text file in UTF-8")


@pytest.mark.parametrize("line, words", [
    ("[model]\nparams = inf", ["model.params", "expected a finite number, got inf"]),
    ("[model]\nparams = nan", ["model.params", "expected a finite number, got nan"]),
    ("[model]\nhidden = 10000000000000000000", ["model.hidden", "expected 1 to 1,000,000, got 1e+19"]),
    ("[train]\nmicro_batch_size = 9223372036854775807", ["train.micro_batch_size", "got 9.22337e+18"]),
    ("[train]\nmax_seq_len = -5", ["train.max_seq_len", "expected 1 to 100,000,000, got -5"]),
    ("[gpu]\nmemory_gib = -inf", ["gpu.memory_gib", "finite"]),
    ("[train]\nmy_knob = nan", ["train.my_knob", "finite"]),
    ('[[ladder.rung]]\nname = "x"\nknob = "micro_batch_size"\nop = "halve"\nmin = inf', ["ladder.rung.min", "finite"]),
])
def test_numbers_are_finite_and_within_their_bounds(isolated_home, line, words):
    path = write(isolated_home / "p.toml", line + "\n")
    expect_error(path, str(path), *words)


def test_an_extends_chain_has_a_depth_limit(isolated_home):
    for i in range(1500):
        write(isolated_home / f"p{i}.toml", f'extends = "./p{i + 1}.toml"\n')
    write(isolated_home / "p1500.toml", 'description = "the end"\n')
    expect_error(isolated_home / "p0.toml", "'extends' goes more than 32 profiles deep")
    assert load_profile(str(isolated_home / "p1480.toml")).description == "the end"


def test_a_gpudoc_toml_that_is_not_a_file_is_named(isolated_home):
    (isolated_home / "gpudoc.toml").mkdir()
    with pytest.raises(ProfileError, match="gpudoc.toml: not a profile file \\(a directory\\)"):
        load_profile(None, cwd=isolated_home)
    (isolated_home / "gpudoc.toml").rmdir()
    (isolated_home / "gpudoc.toml").symlink_to(isolated_home / "nowhere.toml")
    with pytest.raises(ProfileError, match="not a profile file \\(a link to nothing\\)"):
        load_profile(None, cwd=isolated_home)


def test_bind_files_are_checked_as_the_profile_loads_against_the_merged_train(isolated_home):
    write(isolated_home / "base.toml", '[train]\nmicro_batch_size = 2\nprecision = "fp16"\n')
    child = write(isolated_home / "child.toml", """
        extends = "./base.toml"
        [bind.files."config.json"]
        micro_batch_size = ["vram.batch_size", 'TRAINING_CONFIG["bs"]']
        precision = {key = "vram.use_fp16", map = {fp16 = true, bf16 = false}}
    """)
    loaded = load_profile(str(child))  # the knobs come from the parent: fine; no file is read yet
    assert loaded.bind["files"]["config.json"]["precision"]["map"] == {"fp16": True, "bf16": False}
    typo = write(isolated_home / "typo.toml", '[train]\nmicro_batch_size = 2\n[bind.files."c.json"]\n'
                                             'micro_bach_size = "vram.batch_size"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(typo))
    # File, line and key, as every other profile error (SPEC "Profiles"); file and key for --json too.
    assert str(info.value) == (f'{typo}:4: [bind.files."c.json"] micro_bach_size: not a knob in [train] '
                               f"(did you mean 'micro_batch_size'?)")
    assert (info.value.file, info.value.key) == (str(typo), 'bind.files."c.json".micro_bach_size')
    enum = write(isolated_home / "enum.toml", '[train]\nprecision = "fp16"\n[bind.files."c.json"]\n'
                                             'precision = {key = "use_fp16", map = {fp16 = true, bf61 = false}}\n')
    with pytest.raises(ProfileError, match=r"map.bf61: precision is never 'bf61' \(did you mean 'bf16'\?\)"):
        load_profile(str(enum))
    key = write(isolated_home / "key.toml", '[train]\nmicro_batch_size = 2\n[bind.files."c.py"]\n'
                                           'micro_batch_size = "CONFIG[\\"bs"\n')
    with pytest.raises(ProfileError, match=r"key.toml:4: \[bind.files.\"c.py\"\] micro_batch_size: cannot read the key path"):
        load_profile(str(key))
    field = write(isolated_home / "field.toml", '[train]\nmicro_batch_size = 2\n[bind.files."c.yaml"]\n\n'
                                               'micro_batch_size = {key = "a.b", mapp = {}}\n')
    with pytest.raises(ProfileError, match=r"field.toml:5: \[bind.files.\"c.yaml\"\] micro_batch_size: unknown field 'mapp'"):
        load_profile(str(field))


def test_a_file_preset_the_binder_lacks_is_refused_as_the_profile_loads(isolated_home):
    table = write(isolated_home / "table.toml", '[train]\nmicro_batch_size = 2\n[bind.files."ds.json"]\n'
                                               'preset = "deepspeeed"\n')
    expect_error(table, ':4: [bind.files."ds.json"]: unknown preset \'deepspeeed\' (did you mean \'deepspeed\'?)')
    short = write(isolated_home / "short.toml", '[train]\nmicro_batch_size = 2\n[bind.files]\n"a.yaml" = "axolotel"\n')
    expect_error(short, ":4: [bind.files.\"a.yaml\"]: unknown preset 'axolotel' (did you mean 'axolotl'?)")
    # A shell script's preset is an argument preset: its command line is edited as COMMAND's would be.
    shell = write(isolated_home / "shell.toml", '[train]\nmicro_batch_size = 2\n[bind.files]\n'
                                               '"run.sh" = "hf-trainer"\n"b.sh" = "deepspeed"\n')
    expect_error(shell, '[bind.files."b.sh"]: unknown preset \'deepspeed\'')
    ok = write(isolated_home / "ok.toml", '[train]\nmicro_batch_size = 2\n[bind.files]\n"ds.json" = "deepspeed"\n'
                                         '"run.sh" = "hf-trainer"\n')
    assert load_profile(str(ok)).bind["files"]["run.sh"] == "hf-trainer"


def test_parallel_layouts_and_target_length_are_profile_keys(isolated_home):
    ok = write(isolated_home / "ok.toml", "[launch]\nnproc_per_node = 8\ntensor_parallel = 2\npipeline_parallel = 2\n"
                                          "context_parallel = 2\n[train]\nmax_target_len = 128\n")
    profile = load_profile(str(ok))
    assert (profile.launch["tensor_parallel"], profile.train["max_target_len"]) == (2, 128)
    expect_error(write(isolated_home / "a.toml", "[launch]\ntensor_parallel = 0\n"), "launch.tensor_parallel")
    expect_error(write(isolated_home / "b.toml", '[launch]\npipeline_parallel = "2"\n'), "launch.pipeline_parallel",
                 "expected an integer")
    expect_error(write(isolated_home / "c.toml", "[launch]\ncontext_paralel = 2\n"), "did you mean 'context_parallel'")


# The example profile of SPEC.md ("Profiles (TOML)"), copied as it stands: it is the contract.
SPEC_EXAMPLE = '''\
description = "4x A10G 24 GB, Llama-3.2-1B pretraining, DeepSpeed ZeRO"
extends = "a10g-24gb"               # optional: inherit, then override

[gpu]
count = 4                           # GPUs the job needs
min_free_gib = 20                   # per GPU, checked before launch

[env]
PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"
TOKENIZERS_PARALLELISM = "false"
OMP_NUM_THREADS = "4"

[train]                              # the knobs
micro_batch_size = 2
gradient_accumulation_steps = 32
max_seq_len = 1024
gradient_checkpointing = true
precision = "bf16"                   # fp32 | fp16 | bf16 (mixed, fp32 master) | bf16-true
zero_stage = 2                       # 0..3
offload_optimizer = false
offload_params = false
optimizer = "adamw"                  # adamw | adamw_8bit | adafactor | sgd
lora_rank = 0                        # 0 = full fine-tune
quantization = "none"                # none | nf4 | int8 (frozen base weights, QLoRA)
attention = "sdpa"                   # sdpa (flash/mem-efficient) | eager
# gradient_checkpointing may also be "selective"

[launch]
nproc_per_node = 4                   # world size = nproc_per_node x nnodes (also read
nnodes = 1                           # from a torchrun COMMAND; disagreement is a finding)

[model]                              # for estimate/fix; or hf_config = "path/config.json"
arch = "decoder"                     # decoder | encoder | encoder-decoder
params = 1.24e9
layers = 16
hidden = 2048
heads = 32
kv_heads = 8
ffn = 8192
vocab = 128256

[bind]                               # how knobs reach the job
env = true                           # export GPUDOC_MICRO_BATCH_SIZE, ... (default true)
args = "hf-trainer"                  # append/replace the framework's own flags in COMMAND
[bind.files."ds_config.json"]        # edit keys inside a JSON/YAML/TOML config file
micro_batch_size = "train_micro_batch_size_per_gpu"
gradient_accumulation_steps = "gradient_accumulation_steps"
zero_stage = "zero_optimization.stage"

[ladder]
allow_semantic = false
target_utilization = 0.85
[[ladder.rung]]                      # a user rung
name = "fewer-negatives"
knob = "n_negatives"                 # any extra knob declared in [train]
op = "halve"                         # halve | decrement | set
semantic = true
'''


def test_the_spec_example_profile_loads_and_shows(isolated_home):
    path = write(isolated_home / "spec.toml", SPEC_EXAMPLE)
    profile = load_profile(str(path))
    assert profile.knobs["lora_rank"] == 0
    assert [p.stem for p in profile.chain] == ["spec", "a10g-24gb", "gpu-24gb"]
    assert profile.bind["args"] == "hf-trainer" and profile.user_rungs[0].knob == "n_negatives"
    shown = gpudoc_cli("profile", "show", str(path), "--json", cwd=isolated_home)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["profile"]["knobs"]["lora_rank"] == 0


def test_lora_rank_zero_is_a_full_fine_tune_for_the_estimate(isolated_home):
    profile = load_profile(str(write(isolated_home / "spec.toml", SPEC_EXAMPLE)))
    without = replace(profile, train={k: v for k, v in profile.train.items() if k != "lora_rank"})
    assert estimate(profile).peak_bytes == estimate(without).peak_bytes
    assert estimate(profile.with_train({"lora_rank": 16})).peak_bytes < estimate(profile).peak_bytes
    expect_error(write(isolated_home / "p.toml", "[train]\nlora_rank = -1\n"), "train.lora_rank", "expected 0 to 65,536")


def test_bell_after_s_is_the_key_and_notify_after_s_its_older_spelling(isolated_home):
    new = write(isolated_home / "new.toml", "[run]\nbell_after_s = 30\n")
    assert load_profile(str(new)).run == {"bell_after_s": 30}
    old = write(isolated_home / "old.toml", "[run]\nnotify_after_s = 45\n")
    assert load_profile(str(old)).run == {"bell_after_s": 45}
    # Across `extends` the two spellings are one key: the child's value wins whichever it uses.
    child = write(isolated_home / "child.toml", 'extends = "./old.toml"\n[run]\nbell_after_s = 5\n')
    assert load_profile(str(child)).run == {"bell_after_s": 5}
    both = write(isolated_home / "both.toml", "[run]\nbell_after_s = 30\nnotify_after_s = 45\n")
    expect_error(both, f"{both}:3", "run.notify_after_s", "run.bell_after_s")
    expect_error(write(isolated_home / "neg.toml", "[run]\nbell_after_s = -1\n"), "run.bell_after_s", "expected 0 to")


@pytest.mark.parametrize("entry, words", [
    ('FOO = "a\\u0000b"', ["env.FOO", "NUL"]),
    ('"A\\u0000B" = "x"', ['env."A\\u0000B"', "NUL"]),
    ('"C=D" = "1"', ['env."C=D"', "'='"]),
    ('"" = "x"', ['env.""', "needs a name"]),
])
def test_env_entries_that_no_environment_can_carry_are_refused_at_load(isolated_home, entry, words):
    path = write(isolated_home / "p.toml", f'[env]\nOK = "1"\n{entry}\n')
    expect_error(path, f"{path}:3:", *words)


def test_a_nul_in_the_environment_stops_run_before_any_record(isolated_home):
    path = write(isolated_home / "nul.toml", '[env]\nFOO = "a\\u0000b"\n')
    for args in (["check", "-p", str(path)], ["run", "-p", str(path), "--no-check", "--", "echo", "hi"]):
        done = gpudoc_cli(*args, cwd=isolated_home)
        assert done.returncode in (2, 125), done.stderr  # run's own refusals are 125 (README)
        assert done.stderr.strip().splitlines() == [f"gpudoc: {path}:2: env.FOO: the value holds a NUL character, "
                                                    "which no environment variable can carry"]
    assert not (isolated_home / ".gpudoc").exists()  # no "lost" run record


def test_a_profile_extending_its_own_name_is_a_cycle(isolated_home):
    own = write(isolated_home / ".gpudoc" / "profiles" / "mine.toml", 'description = "x"\nextends = "mine"\n')
    message = expect_error(own, f"{own}:2", "extends = 'mine'", "extends itself (a cycle)")
    assert "did you mean" not in message
    # A near miss of its own name is no hint either: following it would be the same cycle.
    near = write(isolated_home / ".gpudoc" / "profiles" / "mine.toml", 'extends = "mien"\n')
    assert "did you mean" not in expect_error(near, "extends = 'mien'", "unknown profile")


def test_an_empty_extends_is_an_error_naming_the_key(isolated_home):
    path = write(isolated_home / "p.toml", 'description = "x"\nextends = ""\n')
    expect_error(path, f"{path}:2", "extends = ''", "empty")


def test_an_unknown_args_preset_is_refused_at_load_with_a_did_you_mean(isolated_home):
    path = write(isolated_home / "p.toml", '[train]\nmicro_batch_size = 2\n[bind]\nenv = true\nargs = "hf-trainr"\n')
    expect_error(path, f"{path}:5", "bind.args", "unknown preset 'hf-trainr'", "did you mean 'hf-trainer'",
                 *arg_preset_names())
    done = gpudoc_cli("check", "-p", str(path), cwd=isolated_home)
    assert done.returncode == 2 and "bind.args" in done.stderr


def test_a_rung_whose_knob_is_a_near_miss_of_a_declared_knob_is_refused(isolated_home):
    path = write(isolated_home / "p.toml", """
        [train]
        n_negatives = 24
        [[ladder.rung]]
        name = "fewer-positives"
        knob = "micro_batch_size"
        op = "halve"
        [[ladder.rung]]
        name = "fewer-negatives"
        knob = "n_negativs"
        op = "halve"
    """)
    expect_error(path, f"{path}:10", "ladder.rung.knob", "rung 'fewer-negatives'", "did you mean 'n_negatives'")
    # The knob may be declared by the child of the profile that holds the rung.
    write(isolated_home / "base.toml", '[[ladder.rung]]\nname = "r"\nknob = "n_negatives"\nop = "halve"\n')
    child = write(isolated_home / "child.toml", 'extends = "./base.toml"\n[train]\nn_negatives = 8\n')
    assert load_profile(str(child)).user_rungs[0].knob == "n_negatives"
    typo = write(isolated_home / "typo.toml", 'extends = "./base.toml"\n[train]\nn_negatives_ = 8\n')
    expect_error(typo, f"{isolated_home / 'base.toml'}:3", "rung 'r'", "did you mean 'n_negatives_'")


# -- trust: a profile another user owns or can write (SPEC "Trust") --------------------------------

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")
ME = owner_name(os.geteuid())
OOM_LOG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "23.65 GiB of which 1.00 GiB is free.\n")
# A profile that names code: its factory's module would leave a marker if it were ever imported.
CODE_PROFILE = """
    [model]
    factory = "planted:make"
    layers = 2
    hidden = 64
    heads = 2
    ffn = 128
    vocab = 100
    [estimate]
    simulate = true
    [train]
    micro_batch_size = 2
    max_seq_len = 16
"""


def _planted_factory(folder: Path) -> Path:
    marker = folder / "IMPORTED"
    write(folder / "planted.py", f"""
        open({str(marker)!r}, "w").write("the planted factory ran")
        def make(micro_batch_size=1):
            raise SystemExit("never")
    """)
    return marker


@needs_root
@pytest.mark.parametrize("command", [["check"], ["estimate"], ["fix", "--log", "oom.log"]])
def test_a_planted_project_profile_naming_a_factory_is_refused_and_its_code_never_runs(isolated_home, command):
    profile = write(isolated_home / "gpudoc.toml", CODE_PROFILE)
    os.chown(profile, NOBODY, NOBODY)
    marker = _planted_factory(isolated_home)
    (isolated_home / "oom.log").write_text(OOM_LOG)
    done = gpudoc_cli(*command, cwd=isolated_home)
    assert not marker.exists()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if str(profile) in ln]
    assert line.startswith(f"gpudoc: {profile} belongs to nobody, not to you")
    assert "it names code to run ([model] factory), refused as a profile" in line


@needs_root
def test_a_planted_project_profile_naming_a_notify_command_refuses_the_launch(isolated_home):
    profile = write(isolated_home / "gpudoc.toml", '[run]\nnotify = "touch NOTIFIED"\n')
    os.chown(profile, NOBODY, NOBODY)
    done = gpudoc_cli("run", "--no-check", "--", "python", "-c", "open('RAN', 'w')", cwd=isolated_home)
    assert done.returncode == 125 and "Traceback" not in done.stderr
    assert f"{profile} belongs to nobody" in done.stderr and "([run] notify), refused" in done.stderr
    assert not (isolated_home / "NOTIFIED").exists() and not (isolated_home / "RAN").exists()


@needs_root
def test_a_planted_project_profile_without_code_is_skipped_in_one_line(isolated_home):
    profile = write(isolated_home / "gpudoc.toml", "[train]\nmicro_batch_size = 3\n")
    os.chown(profile, NOBODY, NOBODY)
    said: list[str] = []
    assert load_profile(say=said.append) is EMPTY
    assert said == [f"gpudoc: {profile} belongs to nobody, not to you (root): skipped (running without a profile; "
                    "if you trust it, copy it to a file of your own and use that)"]
    done = gpudoc_cli("check", "--only", "host.disk", cwd=isolated_home)
    assert done.returncode in (0, 1) and done.stderr.count(f"{profile} belongs to nobody") == 1


def test_a_world_writable_project_profile_is_skipped_naming_its_owner(isolated_home):
    profile = write(isolated_home / "gpudoc.toml", "[train]\nmicro_batch_size = 3\n")
    os.chmod(profile, 0o666)
    said: list[str] = []
    assert load_profile(say=said.append) is EMPTY
    [line] = said
    assert f"{profile} (owner {ME}) can be written by every user (mode 0666): skipped" in line
    assert f"chmod o-w {profile}" in line


@needs_root
def test_a_planted_project_profile_of_a_shipped_name_leaves_the_shipped_one_in_charge(isolated_home):
    planted = write(isolated_home / ".gpudoc" / "profiles" / "gpu-24gb.toml", '[run]\nnotify = "touch x"\n')
    os.chown(planted, NOBODY, NOBODY)
    said: list[str] = []
    profile = load_profile("gpu-24gb", say=said.append)
    assert profile.shipped and profile.path.parent == shipped_profiles_dir()
    assert said == [f"gpudoc: {planted} belongs to nobody, not to you (root): skipped (using {profile.path}; "
                    "if you trust it, copy it to a file of your own and use that)"]
    assert list_profile_names(say=lambda line: None)["gpu-24gb"] == profile.path
    listed = gpudoc_cli("profile", "list", "--json", cwd=isolated_home)
    assert listed.returncode == 0 and f"{planted} belongs to nobody" in listed.stderr
    [row] = [r for r in json.loads(listed.stdout)["profiles"] if r["name"] == "gpu-24gb"]
    assert row["origin"] == "shipped"


def test_a_parent_found_by_name_that_fails_the_rule_is_skipped_for_the_next(isolated_home):
    planted = write(isolated_home / ".gpudoc" / "profiles" / "gpu-24gb.toml", "[gpu]\nmin_free_gib = 1\n")
    os.chmod(planted, 0o666)
    write(isolated_home / "gpudoc.toml", 'extends = "gpu-24gb"\n')
    said: list[str] = []
    profile = load_profile(say=said.append)
    assert profile.gpu["memory_gib"] == 22.5 and profile.gpu.get("min_free_gib") != 1  # the shipped parent
    assert len(said) == 1 and f"{planted} (owner {ME}) can be written by every user" in said[0]


def test_a_profile_the_user_names_that_fails_the_rule_is_refused_not_skipped(isolated_home):
    team = write(isolated_home / "team.toml", "[train]\nmicro_batch_size = 3\n")
    os.chmod(team, 0o666)
    expect_error(team, f"{team} (owner {ME}) can be written by every user (mode 0666): refused as a profile")
    write(isolated_home / "gpudoc.toml", 'extends = "./team.toml"\n')  # a parent named by its file
    with pytest.raises(ProfileError, match="refused as a profile"):
        load_profile(say=lambda line: None)
    done = gpudoc_cli("check", "-p", "team.toml", cwd=isolated_home)
    assert done.returncode == 2 and "refused as a profile" in done.stderr and "Traceback" not in done.stderr


def test_the_project_profile_is_found_from_a_subdirectory_as_far_as_the_records_are(isolated_home):
    from gpudoc.runs.store import RunStore

    (isolated_home / "gpudoc.toml").write_text('[env]\nOMP_NUM_THREADS = "4"\n')
    deeper = isolated_home / "src" / "jobs"
    deeper.mkdir(parents=True)
    assert resolve_profile_path(None, deeper) == isolated_home / "gpudoc.toml"
    # The same search as the run records': the project ends at the folder holding .git.
    repo = isolated_home / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    (repo / ".gpudoc" / "runs").mkdir(parents=True)
    assert resolve_profile_path(None, repo / "sub") is None
    assert RunStore.locate(repo / "sub", os.environ).home == repo / ".gpudoc"
    (repo / "gpudoc.toml").write_text('[env]\nA = "1"\n')
    assert resolve_profile_path(None, repo / "sub") == repo / "gpudoc.toml"


def test_a_nearer_project_profile_others_can_write_is_skipped_and_the_next_one_up_answers(isolated_home):
    (isolated_home / "gpudoc.toml").write_text('[env]\nA = "1"\n')
    sub = isolated_home / "sub"
    sub.mkdir()
    (sub / "gpudoc.toml").write_text('[env]\nA = "2"\n')
    (sub / "gpudoc.toml").chmod(0o666)
    said: list[str] = []
    assert resolve_profile_path(None, sub, say=said.append) == isolated_home / "gpudoc.toml"
    [line] = said
    assert str(sub / "gpudoc.toml") in line and f"skipped (using {isolated_home / 'gpudoc.toml'}" in line


def test_lora_targets_are_a_train_knob_and_model_is_their_older_place(tmp_path):
    # The README lists lora_targets among [train]'s keys; [model] is where older profiles have it.
    from gpudoc.estimate.lora_targets import lora_targets_of

    (tmp_path / "new.toml").write_text('[train]\nlora_rank = 8\nlora_targets = ["q_proj", "v_proj", "o_proj"]\n')
    (tmp_path / "old.toml").write_text('[train]\nlora_rank = 8\n[model]\nlora_targets = ["q_proj", "v_proj", "o_proj"]\n')
    new, old = (load_profile(str(tmp_path / name), tmp_path) for name in ("new.toml", "old.toml"))
    assert new.train["lora_targets"] == old.train["lora_targets"] == ["q_proj", "v_proj", "o_proj"]
    assert "lora_targets" not in old.model and lora_targets_of(old) == ("q", "v", "o")
    (tmp_path / "both.toml").write_text('[train]\nlora_targets = ["q_proj"]\n[model]\nlora_targets = ["v_proj"]\n')
    with pytest.raises(ProfileError, match=r"both.toml:4: model.lora_targets: means the same as train.lora_targets"):
        load_profile(str(tmp_path / "both.toml"), tmp_path)


def test_a_named_project_profile_is_found_from_a_subdirectory_as_far_as_the_records_are(isolated_home):
    from gpudoc.profiles.loader import list_profile_names, load_profile

    profiles = isolated_home / ".gpudoc" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "box.toml").write_text('[gpu]\nmemory_gib = 20\n')
    (profiles / "gpu-24gb.toml").write_text('extends = "gpu-24gb"\n[gpu]\nmemory_gib = 22\n')  # shadows the tier
    deeper = isolated_home / "src" / "jobs"
    deeper.mkdir(parents=True)
    assert resolve_profile_path("box", deeper) == profiles / "box.toml"
    assert load_profile("gpu-24gb", deeper).gpu["memory_gib"] == 22
    assert {"box", "gpu-24gb"} <= set(list_profile_names(deeper))
    # The nearest one answers; a name only the outer one has is not looked for further up.
    (deeper / ".gpudoc" / "profiles").mkdir(parents=True)
    (deeper / ".gpudoc" / "profiles" / "box.toml").write_text('[gpu]\nmemory_gib = 10\n')
    assert load_profile("box", deeper).gpu["memory_gib"] == 10
    assert load_profile("gpu-24gb", deeper).shipped  # the nearest .gpudoc/profiles only, as with the records
    # A nested repository is a project of its own: the search stops at its root, as the records' does.
    nested = isolated_home / "vendor" / "lib"
    (isolated_home / "vendor" / ".git").mkdir(parents=True)
    nested.mkdir(parents=True)
    with pytest.raises(ProfileError, match="unknown profile 'box'"):
        resolve_profile_path("box", nested)
