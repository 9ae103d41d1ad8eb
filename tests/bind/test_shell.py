"""Shell-script flag edits: tokens with positions, lines kept, removed flags take their line."""

from __future__ import annotations

from gpudoc.bind.shell import apply_to_text, main_command, tokenize
from gpudoc.edits.argv import ArgEdits

SCRIPT = ('#!/bin/bash\nset -x\nMODEL=x\ntorchrun --nproc_per_node=2 train.py \\\n'
          '    --name "a b" \\\n    --bf16 \\\n    --bs 8 # the batch\n')


def _edit(text, fn):
    words = main_command(tokenize(text))
    ed = ArgEdits([w.value for w in words[3:]])
    fn(ed)
    return apply_to_text(text, words, 3, ed)


def test_tokenize_quotes_comments_continuations():
    commands = tokenize(SCRIPT)
    assert [[w.value for w in c] for c in commands] == [
        ["set", "-x"], ["MODEL=x"],
        ["torchrun", "--nproc_per_node=2", "train.py", "--name", "a b", "--bf16", "--bs", "8"]]


def test_replace_remove_append():
    out = _edit(SCRIPT, lambda ed: (ed.set_value(("--bs",), "2"), ed.remove(("--bf16",)),
                                    ed.set_value(("--name",), "c d"), ed.set_bool(("--fp16",), True)))
    assert out == ('#!/bin/bash\nset -x\nMODEL=x\ntorchrun --nproc_per_node=2 train.py \\\n'
                   '    --name "c d" \\\n    --fp16 \\\n    --bs 2 # the batch\n')


def test_removing_the_last_line_takes_the_continuation_with_it():
    text = "python t.py \\\n  --a 1 \\\n  --fp16\n"
    words = main_command(tokenize(text))
    ed = ArgEdits([w.value for w in words[2:]])
    ed.remove(("--fp16",))
    assert apply_to_text(text, words, 2, ed) == "python t.py \\\n  --a 1\n"


def test_one_line_command_appends_at_the_end():
    text = "python t.py --a 1  # note\n"
    words = main_command(tokenize(text))
    ed = ArgEdits([w.value for w in words[2:]])
    ed.set_value(("--b",), "2")
    assert apply_to_text(text, words, 2, ed) == "python t.py --a 1 --b 2  # note\n"
