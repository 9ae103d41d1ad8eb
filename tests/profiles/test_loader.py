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
