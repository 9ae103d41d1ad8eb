"""Whether gpudoc may use a file it did not write: the one rule (SPEC, "Trust").

A profile, a factory module, a notify command, a checkpoint, a run record or a runs directory
found on disk is used only when the current user (or root) owns it and nobody else can write it:
on a shared machine another user's ``./gpudoc.toml`` would otherwise run their code as you, and a
file every user can write is anybody's. Group-writable is fine where the group is the user's own
private group (a umask of 002 on systems that give each user one) and, for a team's explicit
``GPUDOC_HOME`` with ``[run] shared = true``, the team's group.

Everything is read with ``lstat``: a link is followed only where the caller means it to be (a
profile the user linked in), and then every link on the way must be the user's too, and the file
it ends at. Nothing here reads a file's contents.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gpudoc.errors import ProfileError

__all__ = ["Refused", "Untrusted", "owner_name", "untrusted"]

# More hops than any real chain of links; a loop of links ends here instead of spinning.
_MAX_LINKS = 40


@dataclass(frozen=True)
class Untrusted:
    """Why gpudoc will not use ``path``: ``why`` names its owner, ``remedy`` what would make it usable."""

    path: Path
    owner: str
    why: str
    remedy: str

    def __str__(self) -> str:
        return f"{self.path} {self.why}"


class Refused(ProfileError):
    """Code to run (a profile that names a factory or a notify command, a factory module) that
    fails the rule: never silently skipped, the command stops with one line (exit 2; 125 for run)."""


def untrusted(path: str | os.PathLike[str], *, follow_links: bool = True,
              group_ok: bool = False) -> Untrusted | None:
    """None when gpudoc may use ``path`` (or it does not exist: the caller says what is missing);
    else why not.

    ``follow_links``: a symbolic link is followed, each link on the way and the file it ends at
    held to the rule; otherwise a link is itself the reason (a checkpoint, a record). ``group_ok``:
    a group-writable file is fine (an explicit shared ``GPUDOC_HOME``).
    """
    current = Path(path)
    for _ in range(_MAX_LINKS):
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return Untrusted(Path(path), "unknown", f"cannot be examined ({exc.strerror or exc})",
                             "check its permissions")
        if not stat.S_ISLNK(info.st_mode):
            return _judge(Path(path), current, info, group_ok=group_ok)
        owner = _owner_problem(Path(path), current, info)
        if owner is not None:
            return owner
        if not follow_links:
            return Untrusted(Path(path), owner_name(info.st_uid), f"is a symbolic link (to {_target(current)})",
                             "put the file itself there, not a link")
        try:
            current = current.parent / os.readlink(current)
        except OSError as exc:
            return Untrusted(Path(path), owner_name(info.st_uid), f"is a link that cannot be read ({exc.strerror})",
                             "replace the link with the file itself")
    return Untrusted(Path(path), "unknown", f"is a chain of more than {_MAX_LINKS} symbolic links",
                     "replace the links with the file itself")


def owner_name(uid: int) -> str:
    """The owner as a person reads it: the user name, else the uid."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _judge(asked: Path, real: Path, info: os.stat_result, *, group_ok: bool) -> Untrusted | None:
    problem = _owner_problem(asked, real, info)
    if problem is not None:
        return problem
    where = "" if real == asked else f" (through a link, at {real})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IWOTH:
        owner = owner_name(info.st_uid)  # named only when it is said: a user lookup can be slow (LDAP)
        return Untrusted(asked, owner, f"(owner {owner}){where} can be written by every user (mode {mode:04o})",
                         f"chmod o-w {real}")
    if mode & stat.S_IWGRP and not group_ok and not _private_group(info.st_gid):
        owner = owner_name(info.st_uid)
        return Untrusted(asked, owner, f"(owner {owner}){where} can be written by group {_group_name(info.st_gid)} "
                                       f"(mode {mode:04o})", f"chmod g-w {real}")
    return None


def _owner_problem(asked: Path, real: Path, info: os.stat_result) -> Untrusted | None:
    if info.st_uid in (os.geteuid(), 0):
        return None
    owner = owner_name(info.st_uid)
    where = "" if real == asked else f" links to {real}, which"
    you = owner_name(os.geteuid())
    return Untrusted(asked, owner, f"{where} belongs to {owner}, not to you ({you})".lstrip(),
                     "if you trust it, copy it to a file of your own and use that")


def _private_group(gid: int) -> bool:
    """The user's own group: their primary group, named after them, with nobody else in it (what
    a umask of 002 relies on where each user has one)."""
    import grp
    import pwd

    try:
        me = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (KeyError, OverflowError):
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return f"gid {gid}"


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "?"
