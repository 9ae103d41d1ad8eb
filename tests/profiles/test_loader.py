"""Profile lookup, `extends`, and validation errors that name file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpudoc.errors import ProfileError
from gpudoc.profiles import load_profile, shipped_profiles_dir
from gpudoc.profiles.loader import list_profile_names, resolve_profile_path
from gpudoc.profiles.model import EMPTY


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
    assert str(info.value) == (f'{typo}: [bind.files."c.json"] micro_bach_size: not a knob in [train] '
                               f"(did you mean 'micro_batch_size'?)")
    enum = write(isolated_home / "enum.toml", '[train]\nprecision = "fp16"\n[bind.files."c.json"]\n'
                                             'precision = {key = "use_fp16", map = {fp16 = true, bf61 = false}}\n')
    with pytest.raises(ProfileError, match=r"map.bf61: precision is never 'bf61' \(did you mean 'bf16'\?\)"):
        load_profile(str(enum))
    key = write(isolated_home / "key.toml", '[train]\nmicro_batch_size = 2\n[bind.files."c.py"]\n'
                                           'micro_batch_size = "CONFIG[\\"bs"\n')
    with pytest.raises(ProfileError, match=r"micro_batch_size: cannot read the key path"):
        load_profile(str(key))


def test_parallel_layouts_and_target_length_are_profile_keys(isolated_home):
    ok = write(isolated_home / "ok.toml", "[launch]\nnproc_per_node = 8\ntensor_parallel = 2\npipeline_parallel = 2\n"
                                          "context_parallel = 2\n[train]\nmax_target_len = 128\n")
    profile = load_profile(str(ok))
    assert (profile.launch["tensor_parallel"], profile.train["max_target_len"]) == (2, 128)
    expect_error(write(isolated_home / "a.toml", "[launch]\ntensor_parallel = 0\n"), "launch.tensor_parallel")
    expect_error(write(isolated_home / "b.toml", '[launch]\npipeline_parallel = "2"\n'), "launch.pipeline_parallel",
                 "expected an integer")
    expect_error(write(isolated_home / "c.toml", "[launch]\ncontext_paralel = 2\n"), "did you mean 'context_parallel'")
