"""Reading JSON back into gpudoc's dataclasses (run records, facts snapshots): the type each field
is annotated with, on every Python gpudoc supports, and a JSON value as a one-line error quotes it.

The dataclasses' annotations are strings (``from __future__ import annotations``) written with
``A | B``, which Python 3.9's types cannot evaluate; ``field_types`` reads them there as
``typing.Union[A, B]``.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
import types
import typing
from typing import Any

# What ``typing.get_origin`` gives for a union: ``typing.Union``, and on 3.10+ ``A | B``'s own type.
_UNION_ORIGINS = tuple(origin for origin in (typing.Union, getattr(types, "UnionType", None)) if origin is not None)


def is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in _UNION_ORIGINS


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, resolved once per class."""
    if sys.version_info >= (3, 10):
        return typing.get_type_hints(cls)
    namespace = {**vars(sys.modules[cls.__module__]), "Union": typing.Union}
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            hints[name] = eval(_unions_spelled_out(annotation), namespace) if isinstance(annotation, str) \
                else annotation  # noqa: S307 - the class's own annotation, written in gpudoc's source
    return hints


def _unions_spelled_out(annotation: str) -> str:
    """``str | None`` -> ``Union[str, None]``, at any depth (``list[int | str]``)."""

    class Spell(ast.NodeTransformer):
        def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
            self.generic_visit(node)
            if not isinstance(node.op, ast.BitOr):
                return node
            return ast.Subscript(value=ast.Name("Union", ast.Load()),
                                 slice=ast.Tuple([node.left, node.right], ast.Load()), ctx=ast.Load())

    tree = ast.fix_missing_locations(Spell().visit(ast.parse(annotation, mode="eval")))
    return ast.unparse(tree)


def shown(value: Any) -> str:
    """A JSON value as a message quotes it: short, whatever its size."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:39] + "…"
