"""Field types of gpudoc's dataclasses on every supported Python, and values quoted in errors."""

from __future__ import annotations

import typing
from dataclasses import dataclass

from gpudoc.jsonshape import _unions_spelled_out, field_types, is_union, shown


@dataclass
class _Record:
    name: str
    size: int | None = None
    tags: list[int | str] | None = None
    sizes: dict[str, float] | None = None


def test_pep_604_unions_are_spelled_out_for_python_3_9_at_any_depth():
    assert _unions_spelled_out("str | None") == "Union[str, None]"
    assert _unions_spelled_out("list[int | str] | None") == "Union[list[Union[int, str]], None]"
    assert _unions_spelled_out("dict[str, float]") == "dict[str, float]"  # nothing to spell out
    # What 3.9 evaluates from the spelled-out text is the union get_type_hints gives on 3.10+.
    spelled = _unions_spelled_out("list[int | str] | None")
    assert eval(spelled, {"Union": typing.Union}) == typing.Optional[list[typing.Union[int, str]]]  # noqa: S307


def test_field_types_resolve_the_string_annotations():
    hints = field_types(_Record)
    assert hints["name"] is str
    assert is_union(hints["size"]) and set(typing.get_args(hints["size"])) == {int, type(None)}
    assert not is_union(hints["name"])


def test_a_value_is_quoted_short_whatever_its_size():
    assert shown("abc") == '"abc"'
    assert shown(None) == "null"
    long = shown(list(range(1000)))
    assert len(long) == 40 and long.endswith("…")
