"""YAML edits change the scalar's characters only: quotes, bool spelling, comments survive."""

from __future__ import annotations

import pytest

from gpudoc.edits.yamledit import set_value
from gpudoc.errors import InputError
from tests.conftest import CONFIGS, gpudoc_cli


def test_quotes_comments_and_bool_capitalisation_are_kept():
    text = "a: 'fp16'  # keep\nb: \"x\"\nc: True # c\nd: ${oc.env:X}\ne: ???\n"
    out = set_value(set_value(set_value(text, ("a",), "bf16"), ("b",), "y"), ("c",), False)
    assert out == "a: 'bf16'  # keep\nb: \"y\"\nc: False # c\nd: ${oc.env:X}\ne: ???\n"


def test_empty_value_gets_a_value_after_the_colon():
    assert set_value("lora_r:\nx: 1\n", ("lora_r",), 8) == "lora_r: 8\nx: 1\n"
    assert set_value("a:  # note\nb: 1\n", ("a",), 3) == "a: 3  # note\nb: 1\n"


def test_new_key_goes_after_the_mappings_last_block_and_before_trailing_comments():
    text = "top: 1\nsect:\n  k: 1\n  sub:\n    - x\n    - y\n\n# tail comment\n"
    out = set_value(text, ("sect", "new"), "v")
    assert out == "top: 1\nsect:\n  k: 1\n  sub:\n    - x\n    - y\n  new: v\n\n# tail comment\n"


def test_missing_final_newline_stays_missing():
    assert set_value("a: 1\nb: 2", ("c",), 3) == "a: 1\nb: 2\nc: 3"
    assert set_value("a: 1\nb: 2", ("b",), 5) == "a: 1\nb: 5"


def test_nested_create_uses_the_files_indent_step():
    out = set_value("a:\n    b: 1\n", ("c", "d"), True)
    assert out == "a:\n    b: 1\nc:\n    d: true\n"


def test_strings_that_would_change_type_are_quoted():
    assert set_value("a: x\n", ("a",), "true") == 'a: "true"\n'
    assert set_value("a: x\n", ("a",), "1e5") == 'a: "1e5"\n'
    assert set_value("a: x\n", ("a",), "bf16-mixed") == "a: bf16-mixed\n"


def test_flow_and_block_values_are_refused_not_mangled():
    with pytest.raises(InputError, match="not a one-line value"):
        set_value("a: |\n  text\n", ("a",), "x")
    with pytest.raises(InputError, match="holds a"):
        set_value("a:\n  b: 1\n", ("a",), 1)


# -- anchors, aliases and merge keys: a value other keys share is refused, naming file and key ----
QLORA = "axolotl__examples__llama-2__qlora.yml"
BATCH_LINES = "gradient_accumulation_steps: 4\nmicro_batch_size: 2\n"
MERGES = {
    "flow": "defaults: &d {micro_batch_size: 2, gradient_accumulation_steps: 4}\n<<: *d\n",
    "block": "defaults: &d\n  micro_batch_size: 2\n  gradient_accumulation_steps: 4\n<<: *d\n",
}


def _qlora(work, batch_lines: str) -> bytes:
    text = (CONFIGS / QLORA).read_text()
    assert BATCH_LINES in text
    (work / "qlora.yml").write_text(text.replace(BATCH_LINES, batch_lines))
    (work / "gpudoc.toml").write_text('[train]\nmicro_batch_size = 4\ngradient_accumulation_steps = 8\n'
                                      '[bind.files]\n"qlora.yml" = "axolotl"\n')
    return (work / "qlora.yml").read_bytes()


def _dry_run(work):
    return gpudoc_cli("run", "--dry-run", "--", "python", "-c", "print(1)", cwd=work,
                      env={"GPUDOC_HOME": str(work / ".gpudoc-home")})


@pytest.mark.parametrize("form", sorted(MERGES))
def test_a_value_from_a_merge_key_is_refused_in_one_line(form, isolated_home):
    before = _qlora(isolated_home, MERGES[form])
    done = _dry_run(isolated_home)
    assert done.stderr == ("gpudoc: qlora.yml: 'micro_batch_size' comes from a YAML merge key ('<<: *d'): its "
                           "value lives in the anchored mapping, which other keys may share, so gpudoc cannot edit "
                           "it in place; give 'micro_batch_size' its own line (it overrides the merge) or edit the "
                           "file by hand\n")
    assert (isolated_home / "qlora.yml").read_bytes() == before
    # The exit status of gpudoc's other refusals to edit a file (here: one that is not YAML).
    (isolated_home / "qlora.yml").write_text("micro_batch_size: [\n")
    assert done.returncode == _dry_run(isolated_home).returncode == 125


def test_an_anchor_an_alias_shares_is_refused_as_shared(isolated_home):
    before = _qlora(isolated_home, "gradient_accumulation_steps: 4\nmicro_batch_size: &mbs 2\n"
                                   "eval_batch_size: *mbs\n")
    done = _dry_run(isolated_home)
    assert done.stderr == ("gpudoc: qlora.yml: 'micro_batch_size' shares the YAML anchor &mbs with other keys "
                           "(*mbs); editing 'micro_batch_size' would change them too; give it a value of its own "
                           "or edit the file by hand\n")
    assert done.returncode == 125
    assert (isolated_home / "qlora.yml").read_bytes() == before


def test_an_alias_and_a_shared_mapping_are_refused_too():
    with pytest.raises(InputError, match=r"^c.yml: 'eval' shares the YAML anchor &mbs with other keys \(\*mbs\); "
                                         r"editing 'eval' would change them too"):
        set_value("micro: &mbs 2\neval: *mbs\n", ("eval",), 4, name="c.yml")
    with pytest.raises(InputError, match=r"^c.yml: 'base' shares the YAML anchor &b .* editing 'base.lr' would"):
        set_value("base: &b\n  lr: 1\nrun:\n  <<: *b\n", ("base", "lr"), 2, name="c.yml")
    with pytest.raises(InputError, match=r"^c.yml: 'base' shares .* editing 'base.new' would"):
        set_value("base: &b\n  lr: 1\nrun:\n  <<: *b\n", ("base", "new"), 2, name="c.yml")


def test_an_anchor_no_alias_uses_keeps_its_anchor_and_the_value_changes():
    assert set_value("micro: &mbs 2  # per GPU\nx: 1\n", ("micro",), 4) == "micro: &mbs 4  # per GPU\nx: 1\n"


def test_a_new_key_beside_a_merge_goes_after_the_mappings_own_keys():
    text = MERGES["block"] + "base_model: x\n"
    assert set_value(text, ("lora_r",), 8) == text + "lora_r: 8\n"
