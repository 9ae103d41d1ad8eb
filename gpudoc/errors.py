"""Exit statuses and the errors that map onto them.

One boundary (``gpudoc.cli.main``) turns these into one line on stderr and an exit status, so
modules raise instead of printing and exiting themselves.
"""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """The SPEC's exit codes, shared by every command."""

    OK = 0
    NEGATIVE = 1  # a fail/error finding, or the command's answer is "no"
    USAGE = 2  # bad switches, bad profile, bad input file
    INTERNAL = 3  # a bug in gpudoc: a crash report is written
    # `gpudoc run` only: the launcher itself refused or failed before the child ran.
    LAUNCH_REFUSED = 125
    NOT_EXECUTABLE = 126
    NOT_FOUND = 127
    INTERRUPTED = 130


class GpudocError(Exception):
    """An expected failure with a one-line message for the user."""

    exit_status: ExitStatus = ExitStatus.USAGE

    def __init__(self, message: str, *, exit_status: ExitStatus | None = None, file: str | None = None,
                 key: str | None = None) -> None:
        super().__init__(message)
        if exit_status is not None:
            self.exit_status = exit_status
        # What the message names, for the JSON error envelope (`--json`): the file and the key.
        self.file = file
        self.key = key


class UsageError(GpudocError):
    """Bad switches or arguments."""


class ProfileError(GpudocError):
    """A profile that cannot be found, parsed or validated. The message names file, line and key."""


class InputError(GpudocError):
    """A file given on the command line (snapshot, log, config) that cannot be read or understood."""


class LaunchError(GpudocError):
    """`gpudoc run` could not start the job."""

    exit_status = ExitStatus.LAUNCH_REFUSED
