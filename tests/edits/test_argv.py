"""Argument-list edits: a value changes where it stands, in the form the user wrote it; every other
token is kept; only what is absent is appended."""

from __future__ import annotations

from gpudoc.edits.argv import ArgEdits


def test_a_value_is_replaced_in_each_form_where_it_stands_and_nothing_else_moves():
    ed = ArgEdits(["--a", "1", "--b=2", "pos", "--a=3"])
    assert ed.set_value(("--a",), "8") is True
    assert ed.set_value(("--b",), "9") is True
    assert ed.result() == ["--a", "8", "--b=9", "pos", "--a=8"]


def test_an_absent_flag_is_appended_in_the_form_asked():
    ed = ArgEdits(["train.py"])
    assert ed.set_value(("--batch", "--bs"), "4") is False
    ed.set_value(("--steps",), "3", append_form="eq")
    assert ed.result() == ["train.py", "--batch", "4", "--steps=3"]


def test_eq_only_ignores_a_separate_value_form():
    ed = ArgEdits(["--lr", "0.1"])
    ed.set_value(("--lr",), "0.2", eq_only=True, append_form="eq")
    assert ed.result() == ["--lr", "0.1", "--lr=0.2"]


def test_a_boolean_keeps_the_users_spelling_and_a_bare_switch_off_is_removed():
    ed = ArgEdits(["--bf16", "true", "--gc=True", "--tf32"])
    ed.set_bool(("--bf16",), False)
    ed.set_bool(("--gc",), False)
    ed.set_bool(("--tf32",), False)
    assert ed.result() == ["--bf16", "false", "--gc=False"]


def test_an_appended_boolean_follows_the_commands_explicit_style():
    assert ArgEdits(["--fp16", "True"]).has(("--fp16",), boolean=True)
    explicit = ArgEdits(["--fp16", "True"])
    explicit.set_bool(("--bf16",), True)
    assert explicit.result() == ["--fp16", "True", "--bf16", "True"]
    bare = ArgEdits(["--fp16"])
    bare.set_bool(("--bf16",), True)
    assert bare.result() == ["--fp16", "--bf16"]
    forced = ArgEdits([])
    forced.set_bool(("--gc",), False, explicit=True)
    assert forced.result() == ["--gc", "false"]


def test_a_switch_and_its_value_are_removed_together():
    ed = ArgEdits(["--fp16", "True", "--x", "1", "--fp16=false"])
    ed.remove(("--fp16",))
    assert ed.result() == ["--x", "1"]
    assert ed.find(("--fp16",)) == []  # a removed token is no longer found


def test_a_key_value_override_keeps_its_plus_prefix_or_is_appended():
    ed = ArgEdits(["++trainer.precision=32", "data.batch_size=4"])
    ed.set_kv("trainer.precision", "bf16-mixed")
    ed.set_kv("data.batch_size", "2")
    ed.set_kv("trainer.accumulate_grad_batches", "2")
    assert ed.result() == ["++trainer.precision=bf16-mixed", "data.batch_size=2", "trainer.accumulate_grad_batches=2"]
