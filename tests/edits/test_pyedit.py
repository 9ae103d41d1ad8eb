"""nanoGPT-style Python configs: the right-hand side becomes a literal, the rest stays."""

from __future__ import annotations

import pytest

from gpudoc.edits.pyedit import load, set_value
from gpudoc.errors import InputError
from tests.conftest import CONFIGS, SEEDS


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


# -- dict keys: seed 003's config/config.py layout ------------------------------------------------
def _seed_003_config() -> str:
    """config/config.py as seed 003 shows it: MAX_SEQ_LENGTH and the TRAINING_CONFIG dict's lines,
    verbatim from the guide, with LORA_CONFIG nested one level deeper."""
    lines = (SEEDS / "003_7b74f3b84a662ff4.txt").read_text(encoding="utf-8").splitlines()
    max_len = next(line for line in lines if line.startswith("MAX_SEQ_LENGTH = 1536  #"))
    batch = next(line for line in lines if line.startswith('"per_device_train_batch_size": 1,  '))
    accum = next(line for line in lines if line.startswith('"gradient_accumulation_steps": 16,  '))
    return (f"import os\n\n{max_len}\n\nTRAINING_CONFIG = {{\n    \"output_dir\": os.path.join(\"out\", \"amr\"),\n"
            f"    {batch}\n    {accum}\n    \"learning_rate\": 2e-4,\n    \"lora\": {{'r': 64, 'alpha': 128}},\n}}\n"
            f"EXTRA = dict(seed=42, bf16=True)\n")


def test_a_dict_key_is_edited_in_place_comments_kept():
    text = _seed_003_config()
    assert load(text)["TRAINING_CONFIG"]["per_device_train_batch_size"] == 1
    assert load(text)["TRAINING_CONFIG"]["output_dir"] is None  # a call: not a value gpudoc can know
    out = set_value(text, ("TRAINING_CONFIG", "per_device_train_batch_size"), 2)
    out = set_value(out, ("TRAINING_CONFIG", "gradient_accumulation_steps"), 8)
    assert out == text.replace('"per_device_train_batch_size": 1,     # Down from 2',
                               '"per_device_train_batch_size": 2,     # Down from 2').replace(
        '"gradient_accumulation_steps": 16,    # Up from 8', '"gradient_accumulation_steps": 8,    # Up from 8')
    assert load(out)["TRAINING_CONFIG"]["gradient_accumulation_steps"] == 8


def test_nested_dicts_and_dict_calls_and_quotes():
    text = _seed_003_config()
    out = set_value(text, ("TRAINING_CONFIG", "lora", "r"), 32)
    assert "\"lora\": {'r': 32, 'alpha': 128}," in out
    out = set_value(out, ("EXTRA", "bf16"), False)
    assert out.endswith("EXTRA = dict(seed=42, bf16=False)\n")
    assert load(out)["EXTRA"] == {"seed": 42, "bf16": False}


def test_a_key_the_dict_lacks_is_refused_not_guessed():
    text = _seed_003_config()
    with pytest.raises(InputError, match=r"'TRAINING_CONFIG.per_device_batch_size' is not in the file: "
                                         r"'TRAINING_CONFIG' has no key 'per_device_batch_size' \(its keys: "
                                         r"output_dir, per_device_train_batch_size"):
        set_value(text, ("TRAINING_CONFIG", "per_device_batch_size"), 2)
    with pytest.raises(InputError, match="no top-level 'TRAIN_CONFIG = ...'"):
        set_value(text, ("TRAIN_CONFIG", "x"), 2)
    with pytest.raises(InputError, match="'MAX_SEQ_LENGTH' is not a dict literal"):
        set_value(text, ("MAX_SEQ_LENGTH", "x"), 2)


def test_real_nanogpt_config_top_level_still_works():
    text = (CONFIGS / "nanoGPT__config__train_gpt2.py").read_text()
    out = set_value(text, ("gradient_accumulation_steps",), 80)
    assert out == text.replace("gradient_accumulation_steps = 5 * 8", "gradient_accumulation_steps = 80")
