"""nanoGPT-style Python configs: the right-hand side becomes a literal, the rest stays."""

from __future__ import annotations

from gpudoc.bind.pyedit import load, set_value


def test_expression_replaced_comment_kept():
    text = "batch_size = 12 # per gpu\ngradient_accumulation_steps = 5 * 8\nname = 'x'\n"
    out = set_value(set_value(text, ("gradient_accumulation_steps",), 80), ("batch_size",), 6)
    assert out == "batch_size = 6 # per gpu\ngradient_accumulation_steps = 80\nname = 'x'\n"
    assert load(text)["gradient_accumulation_steps"] == 40


def test_string_keeps_its_quote_and_missing_name_is_appended():
    assert set_value("dtype = \"float16\"\n", ("dtype",), "bfloat16") == 'dtype = "bfloat16"\n'
    assert set_value("a = 1\n", ("block_size",), 64) == "a = 1\nblock_size = 64\n"
    assert set_value("a = 1", ("block_size",), 64) == "a = 1\nblock_size = 64"


def test_non_ascii_before_the_value():
    text = "n\u00e4me = 'caf\u00e9'; batch_size = 3\n"
    assert set_value(text, ("batch_size",), 4) == "n\u00e4me = 'caf\u00e9'; batch_size = 4\n"
