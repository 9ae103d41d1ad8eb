"""A job's argument parser refusing flags gpudoc put on its command line says so.

gpudoc binds knobs into the job's command line (``[bind] args``) and the ladder's rungs change
flags on a relaunch. When the script's parser does not declare such a flag, it exits 2 with
"unrecognized arguments: --flag": the fault is the binding, not the job, and the diagnosis names
which of the refused flags were gpudoc's, compared with the command the user typed (the first run
of the chain: a relaunch's own command already carries the rung's flags).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from gpudoc.diagnose.diagnosis import Diagnosis

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.+)")
_ARGUMENT = re.compile(r"\bargument (?P<flag>-[\w-]+)(?:/-[\w-]+)*:")


class _Run(Protocol):
    parent: str | None
    command: list[str]


class _Store(Protocol):
    def record_or_none(self, run_id: str) -> _Run | None: ...


def user_command(record: _Run, store: _Store) -> list[str]:
    """The command the user typed: the first run's of this run's chain (as far as it is kept)."""
    seen: set[str] = set()
    while record.parent and record.parent not in seen:
        seen.add(record.parent)
        parent = store.record_or_none(record.parent)
        if parent is None:
            break
        record = parent
    return list(record.command)


def refused_flags(evidence: str) -> list[str]:
    """The flags an argparse refusal names: ``unrecognized arguments: --a 1 --b`` -> [--a, --b]."""
    found = _UNRECOGNIZED.search(evidence)
    if found:
        return [_name(token) for token in found.group("args").split() if token.startswith("-")]
    found = _ARGUMENT.search(evidence)
    return [found.group("flag")] if found else []


def refused_own_flags(diag: Diagnosis | None, typed: Sequence[str], launched: Sequence[str]) -> Diagnosis | None:
    """``diag`` with the refused flags gpudoc added (in ``launched``, not in ``typed``) named."""
    if diag is None or diag.cause != "error" or not diag.evidence:
        return diag
    mine = {_name(token) for token in launched if token.startswith("-")} - {_name(t) for t in typed if t.startswith("-")}
    own = [flag for flag in dict.fromkeys(refused_flags(diag.evidence)) if flag in mine]
    if not own:
        return diag
    which = ", ".join(own)
    said = (f"{which} {'was' if len(own) == 1 else 'were'} added by gpudoc, not typed: the script's parser does "
            "not declare it, so bind that knob another way ([bind.files] for its config, or a flag it reads)")
    return replace(diag, summary=f"{diag.summary.rstrip('.')}; {said}.")


def _name(token: str) -> str:
    return token.split("=", 1)[0]
