"""The workspace of the command being run, for the plumbum command classes to hand down.

plumbum instantiates the command classes itself, so the one ``Workspace`` built in
``gpudoc.cli.main`` reaches them through this context variable instead of a constructor argument.
Kept free of plumbum: the fast launch path reads it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gpudoc.workspace import Workspace

_current: ContextVar[Workspace | None] = ContextVar("gpudoc_workspace", default=None)


@contextmanager
def using(workspace: Workspace) -> Iterator[Workspace]:
    token = _current.set(workspace)
    try:
        yield workspace
    finally:
        _current.reset(token)


def current() -> Workspace:
    """The workspace of the running command (a default one outside ``using``: a library caller)."""
    workspace = _current.get()
    return workspace if workspace is not None else Workspace()
