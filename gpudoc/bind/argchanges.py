"""What an ``ArgEdits`` changed, flag by flag: ``--per_device_train_batch_size 2 -> 8``.

The user typed these flags; when a binding replaces one, the terminal must say so (the job would
otherwise run with a value the user never sees).
"""

from __future__ import annotations

from typing import Any

from gpudoc.bind.args import KNOWN_FLAGS
from gpudoc.edits.argv import ArgEdits


def _split(tok: str) -> tuple[str, str | None]:
    if "=" in tok and (tok.startswith("-") or not tok.startswith("=")):
        key, value = tok.split("=", 1)
        return key, value
    return tok, None


def arg_changes(ed: ArgEdits, where: str = "command") -> list[dict[str, Any]]:
    """``{"knob", "file", "key", "old", "new", "added"}`` per changed flag (``new`` None: removed)."""
    out: list[dict[str, Any]] = []
    toks = ed.tokens
    for idx, new in sorted(ed.replace.items()):
        tok = toks[idx]
        if tok.startswith("-") or ("=" in tok and not tok.startswith("=")):
            key, old = _split(tok)
            if new is None:
                # A bare flag, or ``--flag value`` going together (the value's own entry is skipped).
                value_gone = idx + 1 < len(toks) and ed.replace.get(idx + 1, "") is None and not toks[idx + 1].startswith("-")
                old = old if old is not None else (toks[idx + 1] if value_gone else None)
                out.append(_entry(where, key, old, None))
            else:
                out.append(_entry(where, key, old, _split(new)[1]))
        else:
            if idx > 0 and ed.replace.get(idx - 1, "") is None and new is None:
                continue  # the value of a removed flag: said with the flag
            out.append(_entry(where, toks[idx - 1] if idx > 0 else tok, tok, new))
    i = 0
    app = ed.append
    while i < len(app):
        key, value = _split(app[i])
        if value is None and i + 1 < len(app) and not app[i + 1].startswith("-") and app[i].startswith("-"):
            value = app[i + 1]
            i += 1
        i += 1
        entry = _entry(where, key, None, value if value is not None else "")
        entry["added"] = True
        out.append(entry)
    return out


def _entry(where: str, key: str, old: str | None, new: str | None) -> dict[str, Any]:
    return {"knob": KNOWN_FLAGS.get(key), "file": where, "key": key, "old": old, "new": new, "added": False}
