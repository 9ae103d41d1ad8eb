"""Explicit bindings: key paths, lists and maps, the type check, and the shape checked at load."""

from __future__ import annotations

import pytest

from gpudoc.bind.targets import check_files_table, fit, parse_key, targets
from gpudoc.configvalues import MISSING
from gpudoc.errors import ProfileError

PRECISION = {"precision": ("fp32", "fp16", "bf16", "bf16-true", "fp16-true")}


@pytest.mark.parametrize(("text", "path"), [
    ("vram.use_fp16", ("vram", "use_fp16")),
    ('TRAINING_CONFIG["per_device_train_batch_size"]', ("TRAINING_CONFIG", "per_device_train_batch_size")),
    ("TRAINING_CONFIG['lora']['r']", ("TRAINING_CONFIG", "lora", "r")),
    ('a["b.c"].d', ("a", "b.c", "d")),
    ("layers[0].size", ("layers", "0", "size")),
    ('x["say \\"hi\\""]', ("x", 'say "hi"')),
])
def test_key_paths(text, path):
    assert parse_key(text) == path


@pytest.mark.parametrize("text", ["", "a.", ".a", 'a["b', "a..b", "a[b]", "a. b"])
def test_unreadable_key_paths(text):
    with pytest.raises(ValueError):
        parse_key(text)


def test_a_knob_may_name_several_keys_and_maps():
    spec = ["model.max_seq_len", {"key": "vram.use_fp16", "map": {"fp16": True, "bf16": False}}]
    one, two = targets("p.toml", "precision", spec)
    assert (one.path, one.map) == (("model", "max_seq_len"), None)
    assert two.path == ("vram", "use_fp16") and two.value_for("precision", "bf16", "p.toml") is False
    with pytest.raises(ProfileError, match='precision = "fp32" has no entry in the map for vram.use_fp16 '
                                           r"\(it maps fp16, bf16\); add one"):
        two.value_for("precision", "fp32", "p.toml")
    # A boolean knob's map is spelled with TOML's words.
    (flag,) = targets("p.toml", "gradient_checkpointing", {"key": "gc", "map": {"true": "full", "false": "none"}})
    assert flag.value_for("gradient_checkpointing", True, "p.toml") == "full"


@pytest.mark.parametrize(("spec", "message"), [
    ([], "an empty list binds nothing"),
    (3, "expected a key path string, a list of them"),
    ({"key": "a", "mapp": {}}, "unknown field 'mapp'"),
    ({"map": {"x": 1}}, 'a binding table needs key = "dotted.key"'),
    ({"key": "a", "map": {}}, "map must be a table of VALUE = REPLACEMENT"),
    ({"key": "a", "map": {"x": [1]}}, "map.x: a replacement is a number, boolean or string"),
    ("a..b", "cannot read the key path"),
])
def test_malformed_bindings_are_one_line_naming_them(spec, message):
    with pytest.raises(ProfileError, match=message) as info:
        targets("p.toml: [bind.files.\"c.json\"]", "micro_batch_size", spec)
    assert str(info.value).startswith('p.toml: [bind.files."c.json"] micro_batch_size: ')


@pytest.mark.parametrize(("old", "new", "written"), [
    (8, 4, 4), (0.5, 1, 1), (0.5, 0.25, 0.25), (8, 4.0, 4), ("bfloat16", "float16", "float16"),
    (True, False, False), (MISSING, "x", "x"), (None, 3, 3), ("auto", 4, 4), ("AUTO", True, True),
    ("${data.batch_size}", 4, 4), ("???", 4, 4),
])
def test_values_that_fit(old, new, written):
    got = fit(old, new, file="c.json", key="k", knob="n")
    assert got == written and type(got) is type(written)


@pytest.mark.parametrize(("old", "new", "message"), [
    (True, "fp16", 'c.json: vram.use_fp16 holds the boolean true; precision = "fp16" is a string, not a boolean; '
                   'say how with a value map: precision = {key = "vram.use_fp16", map = {fp16 = true, ...}}'),
    (1, "fp16", 'c.json: vram.use_fp16 holds the integer 1; precision = "fp16" is a string, not an integer; '
                'say how with a value map'),
    (True, 1, "holds the boolean true; precision = 1 is an integer, not a boolean"),
    (8, True, "holds the integer 8; precision = true is a boolean, not an integer"),
    (8, 2.5, "holds the integer 8; precision = 2.5 is a fraction, not an integer"),
    ("bf16", 3, 'holds the string "bf16"; precision = 3 is an integer, not a string'),
    ({"stage": 2}, 3, "holds a table; precision = 3 is an integer, not a table; bind a key inside it"),
])
def test_values_that_do_not_fit(old, new, message):
    with pytest.raises(ProfileError) as info:
        fit(old, new, file="c.json", key="vram.use_fp16", knob="precision")
    assert message in str(info.value)
    assert info.value.file == "c.json" and info.value.key == "vram.use_fp16"


def test_the_files_table_at_load():
    knobs = {"micro_batch_size": 2, "precision": "fp16"}
    check_files_table({"c.json": {"micro_batch_size": "a.b", "precision": {"key": "u", "map": {"fp16": True}}},
                       "ds.json": "deepspeed", "run.sh": {"micro_batch_size": "--bs"}}, knobs, PRECISION, "p.toml")
    with pytest.raises(ProfileError, match=r"p.toml: \[bind.files.\"c.json\"\] micro_bach_size: not a knob in "
                                           r"\[train\] \(did you mean 'micro_batch_size'\?\)"):
        check_files_table({"c.json": {"micro_bach_size": "a"}}, knobs, PRECISION, "p.toml")
    with pytest.raises(ProfileError, match=r"precision: map.bf61: precision is never 'bf61' \(did you mean 'bf16'\?\)"):
        check_files_table({"c.json": {"precision": {"key": "u", "map": {"bf61": True}}}}, knobs, PRECISION, "p.toml")
    with pytest.raises(ProfileError, match="a shell script binds a knob to one flag"):
        check_files_table({"run.sh": {"micro_batch_size": ["--bs", "--b"]}}, knobs, PRECISION, "p.toml")
    with pytest.raises(ProfileError, match="expected a preset name or a table"):
        check_files_table({"c.json": 3}, knobs, PRECISION, "p.toml")
