"""Flags inside a launch script (``train.sh``): the same argument presets, applied to the text.

Many jobs start as ``bash scripts/finetune.sh`` with every flag written in the script, one per
line with ``\\`` continuations. The script is tokenised with positions (quotes, escapes,
comments, continuations), the presets edit the token list, and each edit becomes a change of
exactly those characters: a replaced value keeps its line, a removed bare flag takes its line
with it when the line held nothing else, an appended flag becomes a new line in the same style.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpudoc.edits.argv import ArgEdits
from gpudoc.errors import InputError

_SEPARATORS = {";", "&", "|", "\n"}


@dataclass
class Word:
    value: str  # after quote removal
    start: int
    end: int


def tokenize(text: str, name: str = "script") -> list[list[Word]]:
    """Simple commands of a POSIX shell script, each a list of words with their spans."""
    commands: list[list[Word]] = [[]]
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and text[i + 1:i + 2] == "\n":
            i += 2
            continue
        if ch in " \t\r":
            i += 1
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch in _SEPARATORS:
            if commands[-1]:
                commands.append([])
            i += 1
            continue
        start, value = i, []
        while i < n and text[i] not in " \t\r" and text[i] not in _SEPARATORS:
            c = text[i]
            if c == "\\":
                if text[i + 1:i + 2] == "\n":
                    break
                value.append(text[i + 1:i + 2])
                i += 2
            elif c == "'":
                j = text.find("'", i + 1)
                if j < 0:
                    raise InputError(f"{name}: unterminated ' quote at line {text.count(chr(10), 0, i) + 1}")
                value.append(text[i + 1:j])
                i = j + 1
            elif c == '"':
                j = i + 1
                while j < n and text[j] != '"':
                    if text[j] == "\\" and j + 1 < n:
                        value.append(text[j + 1] if text[j + 1] in '"\\$`\n' else text[j:j + 2])
                        j += 2
                        continue
                    value.append(text[j])
                    j += 1
                if j >= n:
                    raise InputError(f"{name}: unterminated \" quote at line {text.count(chr(10), 0, i) + 1}")
                i = j + 1
            else:
                value.append(c)
                i += 1
        commands[-1].append(Word("".join(value), start, i))
    return [c for c in commands if c]


def main_command(commands: list[list[Word]]) -> list[Word]:
    """The command that carries the flags: the one with the most ``--options``."""
    best = max(commands, key=lambda c: sum(1 for w in c if w.value.startswith("--")), default=None)
    if best is None:
        raise InputError("script has no command")
    return best


def _quote_like(new: str, old_text: str) -> str:
    if old_text[:1] in "'\"" and old_text[-1:] == old_text[:1]:
        q = old_text[0]
        if q not in new and "\\" not in new and "$" not in new:
            return q + new + q
    return shlex.quote(new)


def apply_to_text(text: str, words: list[Word], first: int, edits: ArgEdits) -> str:
    """Apply ``edits`` (made on ``[w.value for w in words[first:]]``) to the script text."""
    patches: list[tuple[int, int, str]] = []
    deleted: dict[int, list[Word]] = {}
    for idx, new in edits.replace.items():
        word = words[first + idx]
        if new is None:
            deleted.setdefault(text.rfind("\n", 0, word.start), []).append(word)
        else:
            patches.append((word.start, word.end, _quote_like(new, text[word.start:word.end])))
    for line_key, gone in deleted.items():
        on_line = [w for w in words if text.rfind("\n", 0, w.start) == line_key]
        if len(gone) == len(on_line):
            # ``--fp16 True`` alone on its line: the line goes, not just the words.
            span = Word("", min(w.start for w in gone), max(w.end for w in gone))
            patches.append(_deletion(text, span))
        else:
            patches.extend(_deletion(text, w) for w in gone)
    if edits.append:
        patches.append(_append_patch(text, words, [shlex.quote(t) for t in edits.append]))
    out = text
    for start, end, repl in sorted(patches, key=lambda p: (p[0], p[1]), reverse=True):
        out = out[:start] + repl + out[end:]
    return out


def _deletion(text: str, word: Word) -> tuple[int, int, str]:
    line_start = text.rfind("\n", 0, word.start) + 1
    line_end = text.find("\n", word.end)
    line_end = len(text) if line_end < 0 else line_end
    before, after = text[line_start:word.start], text[word.end:line_end]
    if not before.strip() and after.strip() in ("\\", ""):
        if after.strip() == "\\":
            return line_start, min(line_end + 1, len(text)), ""
        # Last line of the command: drop it and the continuation that led to it.
        prev_end = line_start - 1
        cont = text.rfind("\\", 0, prev_end)
        if prev_end > 0 and cont >= 0 and not text[cont + 1:prev_end].strip():
            head = cont
            while head > 0 and text[head - 1] in " \t":
                head -= 1
            return head, line_end, ""
    start = word.start
    while start > line_start and text[start - 1] in " \t":
        start -= 1
    return start, word.end, ""


def _append_patch(text: str, words: list[Word], tokens: list[str]) -> tuple[int, int, str]:
    last = words[-1]
    line_start = text.rfind("\n", 0, last.start) + 1
    first_line_start = text.rfind("\n", 0, words[0].start) + 1
    if line_start == first_line_start:
        return last.end, last.end, " " + " ".join(tokens)
    indent = text[line_start:last.start]
    indent = indent[: len(indent) - len(indent.lstrip(" \t"))]
    # A new continuation line just before the command's last line: every existing line is kept.
    new_lines = "".join(f"{indent}{tokens[i]}{(' ' + tokens[i + 1]) if _pairs(tokens, i) else ''} \\\n"
                        for i in _starts(tokens))
    return line_start, line_start, new_lines


def _starts(tokens: list[str]) -> list[int]:
    out, i = [], 0
    while i < len(tokens):
        out.append(i)
        i += 2 if _pairs(tokens, i) else 1
    return out


def _pairs(tokens: list[str], i: int) -> bool:
    return tokens[i].startswith("--") and "=" not in tokens[i] and i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
