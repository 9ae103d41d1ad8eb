"""Signs that a job failed, when no signature says how: no known message is not success.

A log with a launcher's failure summary or a non-zero exit status, a line at ERROR, FATAL or
CRITICAL severity, a failed assertion or check (glog's ``Check failed``), a FAILED banner, or a
traceback that ends in an exception of any name, failed, whatever else it says. The diagnosis is
then ``error`` with the first such line as its evidence; only the absence of every marker (and of
every signature) is "no failure". (A glog line counts by its words, not its one-letter severity:
looking for "E1125" in a gigabyte costs more than the rest of the gate together.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpudoc.diagnose.lines import Line

MARKER = re.compile(
    r"""^(?:ERROR|FATAL|CRITICAL|PANIC)\b                    # severity first: "ERROR:root:...", "FATAL: ..."
      | [\[(](?:ERROR|FATAL|CRITICAL)[\])]                  # "[ERROR] ...", "(FATAL)"
      | \bAssertion\b.*\bfailed\b | \bCheck\ failed\b       # C/C++ assert(), glog CHECK()
      | (?:^|\s)FAILED\s*$ | ^=+\ *FAILED\ *=+$              # "train.py FAILED", a test runner's banner
      | \bChildFailedError\b
      | \bexit(?:ed)?\ (?:with\ )?(?:exit\ )?(?:status|code)\ *:?\ *-?[1-9]\d*
      | ^exitcode\ *:\ *-?[1-9]                               # torchrun's failure summary
    """,
    re.VERBOSE,
)
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_WARNING = re.compile(r"\bwarn(?:ing)?\b", re.IGNORECASE)


def first_marker(lines: Sequence[Line]) -> Line | None:
    """The first line that shows the job failed; a traceback counts by the exception line that
    ends it (the first message after its frames)."""
    in_traceback = False
    for line in lines:
        text = line.text
        if _TRACEBACK.match(text):
            in_traceback = True
            continue
        if not line.is_message or not text.strip():
            continue
        if in_traceback:
            return line  # the exception that ended the traceback, whatever its name
        if MARKER.search(text) and not _WARNING.search(text):
            return line
    return None
