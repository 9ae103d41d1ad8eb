"""Where gpudoc looks for a project's own files from a subdirectory: the one rule, like git's.

The working directory, then each parent, within the project (the search stops after a directory
holding ``.git``) and below the user's home (a stray ``~/.gpudoc`` or ``~/gpudoc.toml`` must not
answer for every project under it). The run records (``RunStore.locate``), the project profile
(``./gpudoc.toml``, ``gpudoc.profiles.loader``) and the completion scripts follow it. Nothing
heavier than ``os`` is imported: ``gpudoc.shellcomplete`` runs on every TAB.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping


def project_folders(cwd: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Iterator[str]:
    """``cwd`` and its parents, nearest first, as far as the rule above allows (``environ``'s HOME)."""
    environ = os.environ if environ is None else environ
    here = os.path.abspath(cwd)
    user_home = os.path.abspath(environ.get("HOME") or os.path.expanduser("~"))
    folder = here
    while True:
        if folder != here and folder == user_home:
            return
        yield folder
        parent = os.path.dirname(folder)
        if os.path.exists(os.path.join(folder, ".git")) or parent == folder:
            return
        folder = parent
