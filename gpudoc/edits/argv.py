"""Edits of an argument list: a flag's value replaced where it stands (``--flag v``, ``--flag=v``,
``key=v``), a token deleted, what is absent appended, every other token as written.

The same edits apply to an argv or to the flags inside a shell script; which flag carries which
knob is the frameworks' business (``gpudoc.frameworks``), not this editor's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudoc.configvalues import as_bool_text


@dataclass
class Occurrence:
    index: int  # the flag token
    name: str
    value_index: int | None = None  # ``--flag value``: the value token
    eq: bool = False  # ``--flag=value`` in one token
    value: str | None = None


@dataclass
class ArgEdits:
    tokens: list[str]
    replace: dict[int, str | None] = field(default_factory=dict)  # None = delete the token
    append: list[str] = field(default_factory=list)

    def result(self) -> list[str]:
        out = []
        for i, tok in enumerate(self.tokens):
            new = self.replace.get(i, tok)
            if new is not None:
                out.append(new)
        return out + self.append

    # -- finding ----------------------------------------------------------------------------
    def find(self, names: tuple[str, ...], *, boolean: bool = False, eq_only: bool = False) -> list[Occurrence]:
        found = []
        for i, tok in enumerate(self.tokens):
            if self.replace.get(i, "") is None:
                continue
            for name in names:
                if tok.startswith(name + "="):
                    found.append(Occurrence(i, name, eq=True, value=tok[len(name) + 1:]))
                elif tok == name and not eq_only:
                    nxt = self.tokens[i + 1] if i + 1 < len(self.tokens) else None
                    if boolean:
                        if nxt is not None and as_bool_text(nxt) is not None and not nxt.startswith("-"):
                            found.append(Occurrence(i, name, i + 1, value=nxt))
                        else:
                            found.append(Occurrence(i, name))
                    else:
                        found.append(Occurrence(i, name, i + 1 if nxt is not None else None, value=nxt))
        return found

    def has(self, names: tuple[str, ...], **kw: Any) -> bool:
        return bool(self.find(names, **kw))

    def uses_explicit_bools(self) -> bool:
        """Does the command spell booleans as ``--flag True``? Then appended flags follow suit."""
        for i, tok in enumerate(self.tokens[:-1]):
            if tok.startswith("--") and "=" not in tok and self.tokens[i + 1] in ("True", "False", "true", "false"):
                return True
        return any(t.startswith("--") and t.split("=", 1)[-1] in ("True", "False") for t in self.tokens if "=" in t)

    # -- editing ----------------------------------------------------------------------------
    def set_value(self, names: tuple[str, ...], value: str, *, eq_only: bool = False,
                  append_form: str = "sep") -> bool:
        """Replace every occurrence's value; append ``names[0]`` when there is none."""
        occs = self.find(names, eq_only=eq_only)
        for occ in occs:
            if occ.eq:
                self.replace[occ.index] = f"{occ.name}={value}"
            elif occ.value_index is not None:
                self.replace[occ.value_index] = value
            else:
                self.append.append(value)  # ``--flag`` at the very end, value missing
        if not occs:
            if append_form == "eq":
                self.append.append(f"{names[0]}={value}")
            else:
                self.append.extend([names[0], value])
        return bool(occs)

    def set_bool(self, names: tuple[str, ...], on: bool, *, explicit: bool = False) -> None:
        """``explicit``: the value is always written (``--flag=false``, ``--flag true``), for a parser
        whose default is on, where a flag left out is not off (TRL's configs)."""
        occs = self.find(names, boolean=True)
        for occ in occs:
            if occ.eq:
                self.replace[occ.index] = f"{occ.name}={_bool_word(on, occ.value)}"
            elif occ.value_index is not None:
                self.replace[occ.value_index] = _bool_word(on, occ.value)
            elif explicit:
                self.replace[occ.index] = f"{occ.name}={_bool_word(on, 'true')}"
            elif not on:
                self.replace[occ.index] = None  # bare flag: off means gone
        if not occs and explicit:
            self.append.extend([names[0], _bool_word(on, "True" if self.uses_explicit_bools() else "true")])
        elif not occs and on:
            self.append.extend([names[0], "True"] if self.uses_explicit_bools() else [names[0]])

    def remove(self, names: tuple[str, ...], *, boolean: bool = True) -> None:
        for occ in self.find(names, boolean=boolean):
            self.replace[occ.index] = None
            if occ.value_index is not None:
                self.replace[occ.value_index] = None

    def set_kv(self, key: str, value: str) -> None:
        """A ``key=value`` override: replaced where it stands (a ``+key=`` / ``++key=`` keeps its prefix), else
        appended as ``key`` is given (``+key``: one the config lacks, which Hydra takes only so)."""
        bare = key.lstrip("+")
        hits = [i for i, t in enumerate(self.tokens)
                if t.lstrip("+").startswith(bare + "=") and self.replace.get(i, "") is not None]
        for i in hits:
            prefix = self.tokens[i][: len(self.tokens[i]) - len(self.tokens[i].lstrip("+"))]
            self.replace[i] = f"{prefix}{bare}={value}"
        if not hits:
            self.append.append(f"{key}={value}")


def _bool_word(on: bool, old: str | None) -> str:
    word = "True" if on else "False"
    if old and old.islower():
        return word.lower()
    return word
