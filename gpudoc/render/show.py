"""Every command's result leaves through here: as text, or as the one versioned JSON envelope."""

from __future__ import annotations

from typing import Any, Protocol

from gpudoc.output import Console
from gpudoc.render import (
    fix_text,  # noqa: F401 - registers the text of fix results
    restore_text,  # noqa: F401 - registers the text of restore results
)
from gpudoc.render.json_doc import dumps, envelope
from gpudoc.render.text import text


class Result(Protocol):
    """What ``gpudoc.results`` objects have in common (the envelope's fields and the body)."""

    @property
    def command(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def exit_code(self) -> int: ...

    def json_body(self) -> dict[str, Any]: ...


def document(result: Result) -> dict[str, Any]:
    """The JSON envelope of a result: the shared keys first, then the command's own."""
    return envelope(result.command, status=result.status, exit_code=result.exit_code, **result.json_body())


def show(result: Result, console: Console, *, as_json: bool) -> int:
    """Print the result (JSON on the console's stdout; text by its renderer) and return its exit code."""
    if as_json:
        console.print(dumps(document(result)))
    else:
        text(result, console)
    console.flush()
    return int(result.exit_code)
